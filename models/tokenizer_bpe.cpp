// The two BPE merge loops. Both keep the piece's symbols in a linked list and a heap of candidate pairs,
// so a piece of n symbols costs O(n log n): byte-level merges the lowest-ranked pair, SentencePiece the
// highest-scored one; ties go to the leftmost pair, as in HF tokenizers and SentencePiece.
#include <queue>

#include "models/tokenizer_impl.hpp"

namespace mk {
namespace {

constexpr int32_t kDead = -2;  // a symbol absorbed into its left neighbour

struct RankedPair {
    int32_t rank, left, left_id, right_id;
    bool operator>(const RankedPair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

struct ScoredPair {
    float score;
    int32_t left, right;
    size_t length;  // bytes of the merged text when queued: stale if either side has changed since
    bool operator<(const ScoredPair& o) const { return score != o.score ? score < o.score : left > o.left; }
};

}  // namespace

void Tokenizer::Impl::encode_byte_bpe(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (pre->ignore_merges()) {  // Llama 3 (HF ignore_merges): a piece that is a whole token is taken as is
        std::string mapped;
        for (unsigned char b : piece) mapped += byte_to_unicode()[b];
        if (auto it = token_to_id.find(mapped); it != token_to_id.end()) {
            out.push_back(it->second);
            return;
        }
    }
    const auto n = static_cast<int32_t>(piece.size());
    std::vector<int32_t> id(n), prev(n), next(n);  // symbols start as one per byte
    for (int32_t i = 0; i < n; ++i) {
        id[i] = byte_token[static_cast<unsigned char>(piece[i])];
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    std::priority_queue<RankedPair, std::vector<RankedPair>, std::greater<>> heap;
    auto try_pair = [&](int32_t left) {
        if (left < 0 || next[left] < 0) return;
        int32_t right = next[left];
        if (id[left] < 0 || id[right] < 0) return;
        if (auto it = merges.find(merge_key(id[left], id[right])); it != merges.end())
            heap.push({it->second.rank, left, id[left], id[right]});
    };
    for (int32_t i = 0; i + 1 < n; ++i) try_pair(i);
    while (!heap.empty()) {
        RankedPair p = heap.top();
        heap.pop();
        // Stale when either side merged since: a position's id only ever grows to a longer token.
        if (id[p.left] != p.left_id || next[p.left] < 0 || id[next[p.left]] != p.right_id) continue;
        int32_t right = next[p.left];
        id[p.left] = merges.at(merge_key(p.left_id, p.right_id)).result;
        id[right] = kDead;
        next[p.left] = next[right];
        if (next[right] >= 0) prev[next[right]] = p.left;
        try_pair(prev[p.left]);
        try_pair(p.left);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) {
        if (id[i] >= 0)
            out.push_back(id[i]);
        else if (data.unk_id >= 0)
            out.push_back(data.unk_id);  // a byte the vocabulary lacks
    }
}

void Tokenizer::Impl::encode_sentencepiece(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<size_t> start, length;  // symbols start as one per UTF-8 character (or per invalid byte)
    for (size_t pos = 0; pos < text.size();) {
        size_t len = utf8_step(text, pos).length;
        start.push_back(pos);
        length.push_back(len);
        pos += len;
    }
    const auto n = static_cast<int32_t>(start.size());
    std::vector<int32_t> prev(n), next(n);
    for (int32_t i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    auto lookup = [&](size_t pos, size_t len) -> int32_t {
        auto it = token_to_id.find(text.substr(pos, len));
        return it != token_to_id.end() && mergeable[it->second] ? it->second : -1;
    };
    std::priority_queue<ScoredPair> heap;
    auto try_pair = [&](int32_t left) {
        if (left < 0 || next[left] < 0) return;
        int32_t right = next[left];
        size_t len = length[left] + length[right];
        if (int32_t merged = lookup(start[left], len); merged >= 0) heap.push({data.scores[merged], left, right, len});
    };
    for (int32_t i = 0; i + 1 < n; ++i) try_pair(i);
    while (!heap.empty()) {
        ScoredPair p = heap.top();
        heap.pop();
        if (length[p.left] == 0 || length[p.right] == 0 || next[p.left] != p.right ||
            length[p.left] + length[p.right] != p.length)
            continue;
        length[p.left] = p.length;
        length[p.right] = 0;
        next[p.left] = next[p.right];
        if (next[p.right] >= 0) prev[next[p.right]] = p.left;
        try_pair(prev[p.left]);
        try_pair(p.left);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) {
        if (int32_t token = lookup(start[i], length[i]); token >= 0) {
            out.push_back(token);
            continue;
        }
        // Byte fallback: a character with no token of its own becomes its <0xNN> byte tokens.
        for (size_t k = 0; k < length[i]; ++k) {
            int32_t byte_id = byte_token[static_cast<unsigned char>(text[start[i] + k])];
            if (byte_id >= 0)
                out.push_back(byte_id);
            else if (data.unk_id >= 0) {
                out.push_back(data.unk_id);
                break;  // one <unk> per character, as SentencePiece without byte fallback
            }
        }
    }
}

}  // namespace mk

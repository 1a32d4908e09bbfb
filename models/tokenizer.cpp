// Tokenizer: builds lookup tables from TokenizerData, splits out special tokens, dispatches to the BPE
// loops, and decodes ids back to bytes (byte-level: GPT-2 byte mapping; SentencePiece: ▁ and <0xNN>).
#include <algorithm>

#include "models/error.hpp"
#include "models/tokenizer_impl.hpp"

namespace mk {
namespace {

// Texts of end-of-turn / end-of-text markers across model families; eos_id always counts too.
constexpr std::string_view kEogTexts[] = {"<|im_end|>",    "<|eot_id|>", "<|eom_id|>",    "<|end_of_text|>",
                                          "<|endoftext|>", "<|end|>",    "<end_of_turn>", "<EOT>"};

bool is_special_type(TokenType t) {
    return t == TokenType::control || t == TokenType::unknown || t == TokenType::user_defined;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

std::string token_raw_bytes(const TokenizerData& data, size_t id) {
    const std::string& text = data.tokens[id];
    switch (data.types[id]) {
    case TokenType::control:
    case TokenType::unknown: return "";
    case TokenType::user_defined: return text;  // added tokens are stored as raw text, not byte-mapped
    case TokenType::byte:
        if (text.size() == 6 && text.starts_with("<0x") && text.ends_with('>')) {
            int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
            if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
        }
        break;
    default: break;
    }
    std::string out;
    if (data.kind == TokenizerKind::sentencepiece_bpe) {
        for (size_t pos = 0; pos < text.size();) {
            if (text.compare(pos, kSentencePieceSpace.size(), kSentencePieceSpace) == 0) {
                out += ' ';
                pos += kSentencePieceSpace.size();
            } else {
                out += text[pos++];
            }
        }
        return out;
    }
    for (size_t pos = 0; pos < text.size();) {
        Utf8Step step = utf8_step(text, pos);
        int b = step.kind == Utf8Step::valid ? unicode_to_byte(step.codepoint) : -1;
        if (b >= 0)
            out += static_cast<char>(b);
        else
            out.append(text, pos, step.length);  // not a byte image: keep the text as it is
        pos += step.length;
    }
    return out;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
    // Printable Latin-1 bytes stand for themselves; the other 68 are moved, in order, to U+0100 upwards.
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        uint32_t moved = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            append_utf8(t[b], printable ? uint32_t(b) : 0x100 + moved++);
        }
        return t;
    }();
    return table;
}

int unicode_to_byte(uint32_t codepoint) {
    static const std::array<int16_t, 0x144> table = [] {
        std::array<int16_t, 0x144> t;
        t.fill(-1);
        for (int b = 0; b < 256; ++b) t[utf8_step(byte_to_unicode()[b], 0).codepoint] = static_cast<int16_t>(b);
        return t;
    }();
    return codepoint < table.size() ? table[codepoint] : -1;
}

Utf8Step utf8_step(std::string_view text, size_t pos) {
    const auto b0 = static_cast<unsigned char>(text[pos]);
    if (b0 < 0x80) return {Utf8Step::valid, 1, b0};
    // Sequence length and the allowed range of the second byte, which excludes overlongs (E0, F0),
    // surrogates (ED) and code points past U+10FFFF (F4); later bytes are always 80..BF.
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return {Utf8Step::invalid, 1, 0};
    }
    uint32_t cp = b0 & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) {
        if (pos + i >= text.size()) return {Utf8Step::incomplete, i, 0};
        const auto b = static_cast<unsigned char>(text[pos + i]);
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {Utf8Step::invalid, i, 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Utf8Step::valid, n, cp};
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

size_t utf8_sanitize(std::string_view text, bool final, std::string& out) {
    size_t pos = 0;
    while (pos < text.size()) {
        Utf8Step step = utf8_step(text, pos);
        if (step.kind == Utf8Step::incomplete && !final) break;
        if (step.kind == Utf8Step::valid)
            out.append(text, pos, step.length);
        else
            append_utf8(out, 0xFFFD);
        pos += step.length;
    }
    return pos;
}

Tokenizer::Impl::Impl(TokenizerData d) : data(std::move(d)) {
    const size_t n = data.tokens.size();
    if (n == 0) fail("tokenizer: empty vocabulary");
    if (data.types.empty()) data.types.assign(n, TokenType::normal);
    if (data.types.size() != n) fail("tokenizer: {} token types for {} tokens", data.types.size(), n);
    if (data.kind == TokenizerKind::sentencepiece_bpe && data.scores.empty()) data.scores.assign(n, 0.0f);
    if (!data.scores.empty() && data.scores.size() != n)
        fail("tokenizer: {} scores for {} tokens", data.scores.size(), n);
    auto check_id = [&](int32_t id, const char* what) {
        if (id < -1 || id >= static_cast<int64_t>(n))
            fail("tokenizer: {} {} out of range (vocabulary of {})", what, id, n);
    };
    check_id(data.bos_id, "bos_token_id");
    check_id(data.eos_id, "eos_token_id");
    check_id(data.unk_id, "unknown_token_id");
    check_id(data.pad_id, "padding_token_id");

    token_to_id.reserve(n);
    bytes.resize(n);
    mergeable.resize(n);
    for (size_t id = 0; id < n; ++id) {
        token_to_id.emplace(data.tokens[id], static_cast<int32_t>(id));
        bytes[id] = token_raw_bytes(data, id);
        mergeable[id] = data.types[id] == TokenType::normal || data.types[id] == TokenType::user_defined;
        if (is_special_type(data.types[id]) && !data.tokens[id].empty())
            specials[static_cast<unsigned char>(data.tokens[id][0])].push_back(static_cast<int32_t>(id));
    }
    for (auto& bucket : specials)
        std::stable_sort(bucket.begin(), bucket.end(),
                         [&](int32_t a, int32_t b) { return data.tokens[a].size() > data.tokens[b].size(); });

    byte_token.fill(-1);
    if (data.kind == TokenizerKind::byte_bpe) {
        pre.emplace(data.pre);
        for (int b = 0; b < 256; ++b)
            if (auto it = token_to_id.find(byte_to_unicode()[b]); it != token_to_id.end()) byte_token[b] = it->second;
        merges.reserve(data.merges.size());
        for (size_t rank = 0; rank < data.merges.size(); ++rank) {
            const std::string& merge = data.merges[rank];
            size_t space = merge.find(' ', 1);
            if (space == std::string::npos || space + 1 >= merge.size())
                fail("merges[{}]: expected \"left right\", got \"{}\"", rank, merge);
            auto find = [&](std::string_view text) {
                auto it = token_to_id.find(text);
                if (it == token_to_id.end())
                    fail("merges[{}] \"{}\": \"{}\" is not in the vocabulary", rank, merge, text);
                return it->second;
            };
            std::string_view m = merge;
            int32_t left = find(m.substr(0, space)), right = find(m.substr(space + 1));
            int32_t result = find(std::string(m.substr(0, space)) + std::string(m.substr(space + 1)));
            merges.try_emplace(merge_key(left, right), BpeMerge{static_cast<int32_t>(rank), result});
        }
    } else {
        for (int b = 0; b < 256; ++b)
            if (auto it = token_to_id.find(fmt::format("<0x{:02X}>", b)); it != token_to_id.end())
                byte_token[b] = it->second;
    }

    if (data.eog_ids.empty()) {
        if (data.eos_id >= 0) data.eog_ids.push_back(data.eos_id);
        for (std::string_view text : kEogTexts)
            if (auto it = token_to_id.find(text);
                it != token_to_id.end() && is_special_type(data.types[it->second]) && it->second != data.eos_id)
                data.eog_ids.push_back(it->second);
        std::sort(data.eog_ids.begin(), data.eog_ids.end());
    }
    eog.assign(n, 0);
    for (int32_t id : data.eog_ids) {
        check_id(id, "end-of-generation id");
        if (id >= 0) eog[id] = 1;
    }
}

Tokenizer::Tokenizer(TokenizerData data) : impl_(std::make_unique<Impl>(std::move(data))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

// BOS: added only when data.add_bos (GGUF tokenizer.ggml.add_bos_token) says so, and never twice when the
// text itself starts with the BOS text (e.g. a rendered Llama 3 chat prompt).
std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    const Impl& m = *impl_;
    const TokenizerData& d = m.data;
    std::vector<int32_t> out;
    if (d.add_bos && d.bos_id >= 0) out.push_back(d.bos_id);

    auto encode_raw = [&](std::string_view segment) {
        if (segment.empty()) return;
        if (d.kind == TokenizerKind::byte_bpe) {
            for (std::string_view piece : m.pre->split(segment)) m.encode_byte_bpe(piece, out);
            return;
        }
        // Every raw segment starts the text or follows a special token: both get the space prefix.
        std::string escaped = d.add_space_prefix ? std::string(kSentencePieceSpace) : std::string();
        for (char c : segment) {
            if (c == ' ')
                escaped += kSentencePieceSpace;
            else
                escaped += c;
        }
        m.encode_sentencepiece(escaped, out);
    };

    // Special tokens: leftmost, then longest match, as HF's added-token matcher. Control and unknown
    // tokens only when parse_special; user-defined tokens always (HF: non-special added tokens).
    size_t raw_begin = 0;
    for (size_t pos = 0; pos < text.size();) {
        int32_t found = -1;
        for (int32_t id : m.specials[static_cast<unsigned char>(text[pos])]) {
            if (!parse_special && d.types[id] != TokenType::user_defined) continue;
            if (text.compare(pos, d.tokens[id].size(), d.tokens[id]) == 0) {
                found = id;
                break;
            }
        }
        if (found < 0) {
            ++pos;
            continue;
        }
        encode_raw(text.substr(raw_begin, pos - raw_begin));
        out.push_back(found);
        pos += d.tokens[found].size();
        raw_begin = pos;
    }
    encode_raw(text.substr(raw_begin));
    if (d.add_bos && d.bos_id >= 0 && out.size() >= 2 && out[1] == d.bos_id) out.erase(out.begin());
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string raw;
    for (int32_t id : ids) raw += token_bytes(id);
    // SentencePiece decoding drops the space that add_space_prefix put in front (HF: Strip(" ", 1, 0)).
    if (impl_->data.kind == TokenizerKind::sentencepiece_bpe && impl_->data.add_space_prefix && raw.starts_with(' '))
        raw.erase(0, 1);
    std::string out;
    utf8_sanitize(raw, true, out);
    return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size())
        fail("tokenizer: token id {} out of range (vocabulary of {})", id, impl_->bytes.size());
    return impl_->bytes[id];
}

size_t Tokenizer::vocab_size() const { return impl_->data.tokens.size(); }
const TokenizerData& Tokenizer::data() const { return impl_->data; }

bool Tokenizer::is_eog(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() && impl_->eog[id];
}

int32_t Tokenizer::find_token(std::string_view text) const {
    auto it = impl_->token_to_id.find(text);
    return it == impl_->token_to_id.end() ? -1 : it->second;
}

std::string StreamDecoder::push(int32_t id) {
    pending_ += tokenizer_->token_bytes(id);
    std::string out;
    pending_.erase(0, utf8_sanitize(pending_, false, out));
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    utf8_sanitize(pending_, true, out);
    pending_.clear();
    return out;
}

}  // namespace mk

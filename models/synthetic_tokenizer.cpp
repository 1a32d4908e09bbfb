// The synthetic models' byte-level BPE vocabulary (3 control tokens, 256 bytes, deterministic merges up to
// exactly vocab_size tokens) and their ChatML chat template.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "models/error.hpp"
#include "models/synthetic.hpp"
#include "models/tokenizer_impl.hpp"

namespace mk {

namespace {

// Merges are first learned from this text, so common words encode to few tokens.
constexpr std::string_view kCorpus =
    "The capital of France is Paris. Hello world! Hello, we can use the model to answer the question. "
    "You are a helpful assistant. The user asks and the assistant answers. The system message comes first. "
    "There is a house on the hill, and the house is near the river. What is the weather like today? "
    "It is a sunny day in the city, and the people are walking in the park with their friends. "
    "Please tell me a story about a cat and a dog who live together in the same house. "
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. "
    "This is a test of the synthetic tokenizer, which is the same for every model of the same size. "
    "Numbers like 123 and 2024 are written with digits. Where are the children playing? They are playing outside.";

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest map to U+0100 upward.
std::vector<std::string> byte_symbols() {
    std::vector<std::string> symbols(256);  // byte -> UTF-8 text of its stand-in character
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        append_utf8(symbols[b], printable ? b : next++);
    }
    return symbols;
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Pre-tokenizes the corpus roughly as GPT-2 does: " word", digit runs, single other characters.
std::map<std::string, int> corpus_words() {
    std::map<std::string, int> words;
    size_t i = 0;
    while (i < kCorpus.size()) {
        size_t j = i + (kCorpus[i] == ' ' && i + 1 < kCorpus.size() && is_letter(kCorpus[i + 1]) ? 1 : 0);
        if (is_letter(kCorpus[j])) {
            while (j < kCorpus.size() && is_letter(kCorpus[j])) ++j;
        } else if (kCorpus[j] >= '0' && kCorpus[j] <= '9') {
            while (j < kCorpus.size() && kCorpus[j] >= '0' && kCorpus[j] <= '9') ++j;
        } else {
            ++j;
        }
        ++words[std::string(kCorpus.substr(i, j - i))];
        i = j;
    }
    return words;
}

struct VocabBuilder {
    TokenizerData& data;
    size_t target;
    std::unordered_set<std::string> known;

    bool full() const { return data.tokens.size() >= target; }
    bool add(const std::string& left, const std::string& right) {
        std::string merged = left + right;
        if (full() || !known.insert(merged).second) return false;
        data.merges.push_back(left + " " + right);
        data.tokens.push_back(merged);
        data.types.push_back(TokenType::normal);
        return true;
    }

    // Classic BPE training on the corpus: merge the most frequent adjacent pair (ties: smallest pair).
    void learn(const std::vector<std::string>& bytes) {
        std::vector<std::pair<std::vector<std::string>, int>> words;  // symbols of each word, its count
        for (const auto& [text, count] : corpus_words()) {
            std::vector<std::string> symbols;
            for (unsigned char c : text) symbols.push_back(bytes[c]);
            words.emplace_back(std::move(symbols), count);
        }
        while (!full()) {
            std::map<std::pair<std::string, std::string>, int> pairs;
            for (const auto& [symbols, count] : words)
                for (size_t i = 0; i + 1 < symbols.size(); ++i)
                    if (!known.count(symbols[i] + symbols[i + 1])) pairs[{symbols[i], symbols[i + 1]}] += count;
            auto best = pairs.end();
            for (auto it = pairs.begin(); it != pairs.end(); ++it)
                if (best == pairs.end() || it->second > best->second) best = it;
            if (best == pairs.end() || best->second < 2) return;
            const auto [left, right] = best->first;
            add(left, right);
            for (auto& [symbols, count] : words)
                for (size_t i = 0; i + 1 < symbols.size(); ++i)
                    if (symbols[i] == left && symbols[i + 1] == right) {
                        symbols[i] += symbols[i + 1];
                        symbols.erase(symbols.begin() + ptrdiff_t(i) + 1);
                    }
        }
    }

    // Then systematically: every word-like token (letters, optionally after "Ġ") extended by each letter.
    void fill(const std::string& space) {
        static constexpr std::string_view kLetters = "etaoinsrhldcumfpgwybvkxjqz";
        for (size_t cursor = 0; !full(); ++cursor) {
            const std::string token = data.tokens[cursor];
            std::string_view rest = token;
            if (rest.starts_with(space)) rest.remove_prefix(space.size());
            if (!std::all_of(rest.begin(), rest.end(), is_letter) || data.types[cursor] != TokenType::normal) continue;
            for (char c : kLetters) add(token, std::string(1, c));
        }
    }
};

}  // namespace

TokenizerData synthetic_tokenizer(int64_t vocab_size) {
    if (vocab_size < 259 || vocab_size > (int64_t(1) << 24))
        fail("synthetic tokenizer: vocab_size {} is outside [259, 2^24]", vocab_size);
    TokenizerData data;
    data.kind = TokenizerKind::byte_bpe;
    data.pre = "gpt-2";
    for (const char* control : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        data.tokens.emplace_back(control);
        data.types.push_back(TokenType::control);
    }
    const std::vector<std::string> bytes = byte_symbols();
    VocabBuilder builder{data, size_t(vocab_size), {}};
    for (const std::string& t : data.tokens) builder.known.insert(t);
    for (const std::string& b : bytes) {
        data.tokens.push_back(b);
        data.types.push_back(TokenType::normal);
        builder.known.insert(b);
    }
    builder.learn(bytes);
    builder.fill(bytes[' ']);
    data.bos_id = 0;  // <|endoftext|>, not added (add_bos false)
    data.eos_id = 2;  // <|im_end|>
    data.pad_id = 0;
    data.eog_ids = {0, 2};
    return data;
}

std::string_view synthetic_chat_template() {
    return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

}  // namespace mk

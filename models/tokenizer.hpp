// Tokenizers built from a model file's own metadata: GPT-2 byte-level BPE (SmolLM2, Llama 3, Qwen)
// and SentencePiece-style BPE (Llama 2, TinyLlama), with special tokens and streaming UTF-8 decode.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mk {

class GgufFile;

enum class TokenizerKind { byte_bpe, sentencepiece_bpe };

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

// Everything a tokenizer is built from; the loaders fill it, the synthetic writer writes it out.
struct TokenizerData {
    TokenizerKind kind = TokenizerKind::byte_bpe;
    std::string pre = "default";        // pre-tokenizer name (tokenizer.ggml.pre): gpt-2, smollm, llama-bpe, qwen2, ...
    std::vector<std::string> tokens;    // id -> token text as stored (byte-level BPE: GPT-2 byte-to-unicode form)
    std::vector<float> scores;          // SentencePiece merge scores (empty for byte-level BPE)
    std::vector<TokenType> types;       // id -> type
    std::vector<std::string> merges;    // byte-level BPE merges "left right", highest priority first
    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
    bool add_bos = false;
    bool add_space_prefix = false;      // SentencePiece: prepend "▁" to the text
    std::vector<int32_t> eog_ids;       // ids that end generation (eos, <|im_end|>, <|eot_id|>, ...)
};

class Tokenizer {
public:
    explicit Tokenizer(TokenizerData data);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    static Tokenizer from_gguf(const GgufFile& file);
    static Tokenizer from_hf_json(const std::filesystem::path& tokenizer_json);  // HF tokenizer.json

    // parse_special: text like "<|im_start|>" becomes its control token instead of plain text.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    std::string decode(std::span<const int32_t> ids) const;
    std::string token_bytes(int32_t id) const;  // the raw bytes a token stands for ("" for control tokens)

    size_t vocab_size() const;
    const TokenizerData& data() const;
    bool is_eog(int32_t id) const;
    int32_t find_token(std::string_view text) const;  // exact token text -> id, or -1

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text, holding back bytes of a UTF-8 sequence split across tokens.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    std::string push(int32_t id);  // the complete UTF-8 text now available
    std::string flush();           // whatever is left (invalid bytes become U+FFFD)

private:
    const Tokenizer* tokenizer_;
    std::string pending_;
};

}  // namespace mk

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
    std::vector<int32_t> eog_ids;       // ids that end generation; when empty, Tokenizer fills in eos and the
                                        // special tokens <|im_end|>, <|eot_id|>, <|eom_id|>, <|end_of_text|>,
                                        // <|endoftext|>, <|end|>, <end_of_turn>, <EOT> found in the vocabulary
};

class Tokenizer {
public:
    explicit Tokenizer(TokenizerData data);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    static Tokenizer from_gguf(const GgufFile& file);
    // HF tokenizer.json; bos/eos/unk/pad and add_bos_token come from tokenizer_config.json beside it when
    // present (else from the post-processor template and model.unk_token).
    static Tokenizer from_hf_json(const std::filesystem::path& tokenizer_json);

    // parse_special: text like "<|im_start|>" becomes its control token instead of plain text
    // (user-defined tokens are always matched, as HF matches non-special added tokens).
    // BOS is prepended only when data().add_bos, and not again when the text already starts with it.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    // Bytes of the ids as UTF-8 (invalid bytes become U+FFFD; control tokens give nothing). SentencePiece
    // with add_space_prefix drops the one leading space the prefix produced.
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

// Writes `data` as an HF tokenizer.json at `path`, and its special tokens (bos/eos/unk/pad_token,
// add_bos_token) into tokenizer_config.json beside it, merged into that file if it exists.
// from_hf_json reads both back to the same TokenizerData (the pre name canonicalized: starcoder -> smollm).
void write_hf_tokenizer_json(const TokenizerData& data, const std::filesystem::path& path);

// Turns a stream of ids into text, holding back bytes of a UTF-8 sequence split across tokens.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    std::string push(int32_t id);  // the complete UTF-8 text now available (no leading-space strip)
    std::string flush();           // whatever is left (invalid bytes become U+FFFD)

private:
    const Tokenizer* tokenizer_;
    std::string pending_;
};

}  // namespace mk

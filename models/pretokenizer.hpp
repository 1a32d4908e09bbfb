// Byte-level BPE pre-tokenizers chosen by tokenizer.ggml.pre: a list of PCRE2 (UTF + UCP) stages, each
// splitting every piece of the previous stage into its matches and the gaps between them, as HF's
// Split(behavior = Isolated) does, so lookaheads such as \s+(?!\S) behave as in the HF regex.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mk {

// The regex of GPT-2's ByteLevel pre-tokenizer (HF's use_regex = true).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// smollm / starcoder isolate every digit before the GPT-2 split (HF: Digits(individual_digits = true)).
inline constexpr std::string_view kDigitPattern = R"(\p{N})";

class PreTokenizer {
public:
    // Throws mk::Error naming an unknown pre-tokenizer name and listing the known ones.
    explicit PreTokenizer(std::string_view pre_name);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Pieces of `text`, in order, covering it exactly; they point into `text`. Bytes that are not
    // valid UTF-8 never match a pattern and so end up in gap pieces.
    std::vector<std::string_view> split(std::string_view text) const;

    const std::string& canonical_name() const { return canonical_; }  // gpt-2, smollm, llama-bpe or qwen2
    bool split_digits() const { return split_digits_; }
    std::string_view pattern() const { return pattern_; }             // the main (last-stage) regex
    bool ignore_merges() const { return canonical_ == "llama-bpe"; }  // Llama 3: whole-word vocab hits skip merges

private:
    struct Stage;
    std::string canonical_;
    std::string_view pattern_;
    bool split_digits_ = false;
    std::vector<std::unique_ptr<Stage>> stages_;
};

// The canonical pre-tokenizer name for a main regex (kLlama3Pattern -> "llama-bpe"), or "" if unknown.
std::string pretokenizer_name_for_pattern(std::string_view pattern);

}  // namespace mk

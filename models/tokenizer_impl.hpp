// Internal to the tokenizer: the tables a Tokenizer builds from its TokenizerData, the BPE merge loops
// (tokenizer_bpe.cpp) and the UTF-8 / GPT-2 byte-to-unicode helpers they share.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/pretokenizer.hpp"
#include "models/tokenizer.hpp"

namespace mk {

struct StringHash {
    using is_transparent = void;  // lets find() take a string_view without building a std::string
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeMerge {
    int32_t rank;    // position in the merge list: lower merges first
    int32_t result;  // id of the merged token
};

struct Tokenizer::Impl {
    TokenizerData data;
    TokenMap token_to_id;                           // first id wins when a text repeats
    std::vector<std::string> bytes;                 // id -> raw bytes it decodes to
    std::vector<uint8_t> eog;                       // id -> ends generation
    std::vector<uint8_t> mergeable;                 // SentencePiece: id may be a merge result (normal, user_defined)
    std::unordered_map<uint64_t, BpeMerge> merges;  // byte-level: (left id << 32 | right id) -> merge
    std::array<int32_t, 256> byte_token{};          // byte-level: a byte's one-character token; SPM: <0xNN>; -1 if none
    std::optional<PreTokenizer> pre;                // byte-level only
    std::array<std::vector<int32_t>, 256> specials;  // matchable special tokens by first byte, longest first

    explicit Impl(TokenizerData d);
    // Appends the ids of one pre-tokenized piece (byte-level) or of one escaped text segment (SentencePiece).
    void encode_byte_bpe(std::string_view piece, std::vector<int32_t>& out) const;
    void encode_sentencepiece(std::string_view escaped, std::vector<int32_t>& out) const;
};

inline uint64_t merge_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

// GPT-2's reversible byte <-> printable-character mapping: byte b becomes the UTF-8 text byte_to_unicode()[b].
const std::array<std::string, 256>& byte_to_unicode();
int unicode_to_byte(uint32_t codepoint);  // -1 when the code point is no byte's image

// One step of UTF-8 decoding at text[pos], following the Unicode "maximal subpart" rule for bad input.
struct Utf8Step {
    enum Kind { valid, invalid, incomplete } kind;
    size_t length;       // bytes consumed (invalid: the maximal subpart, >= 1; incomplete: bytes present)
    uint32_t codepoint;  // valid only
};
Utf8Step utf8_step(std::string_view text, size_t pos);
// U+2581 "▁", the space of SentencePiece vocabularies.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";
void append_utf8(std::string& out, uint32_t codepoint);
// Copies complete, valid UTF-8 from `text`, writing U+FFFD for each invalid subpart. An incomplete
// sequence at the end becomes U+FFFD when `final`, else it is left unconsumed. Returns bytes consumed.
size_t utf8_sanitize(std::string_view text, bool final, std::string& out);

}  // namespace mk

// Byte-level BPE pre-tokenizers: name table and the PCRE2 split loop (matches and gaps, in order).
#include "models/pretokenizer.hpp"

#include <pcre2.h>

#include <array>

#include "models/error.hpp"

namespace mk {
namespace {

struct PreFamily {
    const char* canonical;
    std::string_view pattern;
    bool split_digits;
    std::vector<std::string_view> aliases;
};

const std::array<PreFamily, 4>& families() {
    static const std::array<PreFamily, 4> table = {{
        {"gpt-2", kGpt2Pattern, false, {"gpt-2", "gpt2", "default", "phi-2", "roberta-bpe"}},
        {"smollm", kGpt2Pattern, true, {"smollm", "starcoder", "refact"}},
        {"llama-bpe", kLlama3Pattern, false, {"llama-bpe", "llama3", "llama-v3", "smaug-bpe"}},
        {"qwen2", kQwen2Pattern, false, {"qwen2", "deepseek-r1-qwen"}},
    }};
    return table;
}

}  // namespace

// One compiled regex; pcre2_code is read-only after compilation, so one Stage serves many threads.
struct PreTokenizer::Stage {
    pcre2_code* code = nullptr;
    explicit Stage(std::string_view pattern) {
        int error = 0;
        PCRE2_SIZE error_offset = 0;
        // MATCH_INVALID_UTF: invalid UTF-8 in the text is never matched instead of failing the match.
        code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
        if (!code) {
            std::array<PCRE2_UCHAR, 256> message{};
            pcre2_get_error_message(error, message.data(), message.size());
            fail("pre-tokenizer regex '{}': {} at offset {}", pattern, reinterpret_cast<const char*>(message.data()),
                 error_offset);
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
    }
    ~Stage() { pcre2_code_free(code); }
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;

    // Appends the matches of this stage in `piece` and the unmatched gaps between them.
    void split(std::string_view piece, pcre2_match_data* match, std::vector<std::string_view>& out) const {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
        size_t start = 0, gap_begin = 0;
        while (start < piece.size()) {
            int rc = pcre2_match(code, subject, piece.size(), start, 0, match, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) fail("pre-tokenizer: PCRE2 match error {}", rc);
            const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
            size_t begin = ovector[0], end = ovector[1];
            if (begin > gap_begin) out.push_back(piece.substr(gap_begin, begin - gap_begin));
            if (end > begin) out.push_back(piece.substr(begin, end - begin));
            gap_begin = end;
            // An empty match cannot consume text: step over one character (the gap keeps it).
            start = end;
            if (end == begin)
                for (++start; start < piece.size() && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80;)
                    ++start;
        }
        if (gap_begin < piece.size()) out.push_back(piece.substr(gap_begin));
    }
};

PreTokenizer::PreTokenizer(std::string_view pre_name) {
    for (const PreFamily& family : families()) {
        for (std::string_view alias : family.aliases) {
            if (alias != pre_name) continue;
            canonical_ = family.canonical;
            pattern_ = family.pattern;
            split_digits_ = family.split_digits;
            if (split_digits_) stages_.push_back(std::make_unique<Stage>(kDigitPattern));
            stages_.push_back(std::make_unique<Stage>(pattern_));
            return;
        }
    }
    std::string known;
    for (const PreFamily& family : families())
        for (std::string_view alias : family.aliases) known += (known.empty() ? "" : ", ") + std::string(alias);
    fail("unknown pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}", pre_name, known);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces{text}, next;
    if (text.empty()) return {};
    pcre2_match_data* match = pcre2_match_data_create(4, nullptr);
    if (!match) fail("pre-tokenizer: out of memory");
    try {
        for (const auto& stage : stages_) {
            next.clear();
            for (std::string_view piece : pieces) stage->split(piece, match, next);
            pieces.swap(next);
        }
    } catch (...) {
        pcre2_match_data_free(match);
        throw;
    }
    pcre2_match_data_free(match);
    return pieces;
}

std::string pretokenizer_name_for_pattern(std::string_view pattern) {
    for (const PreFamily& family : families())
        if (!family.split_digits && family.pattern == pattern) return family.canonical;
    return "";
}

}  // namespace mk

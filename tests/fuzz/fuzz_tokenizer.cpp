// Fuzz target: encode and decode of arbitrary bytes with a real vocabulary (StarCoder byte-level BPE,
// loaded once from the test data of tools/setup.sh --test). Input byte 0 picks parse_special; the rest is text, and also ids.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/tokenizer.hpp"
#include "tests/test_data.hpp"

namespace {

const mk::Tokenizer& tokenizer() {
    static const mk::Tokenizer t =
        mk::Tokenizer::from_gguf(mk::GgufFile::open(mk::test::real_data_dir() / "ggml-vocab-starcoder.gguf"));
    return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mk::Tokenizer& t = tokenizer();
    if (size == 0) return 0;
    const bool parse_special = data[0] & 1;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        const std::vector<int32_t> ids = t.encode(text, parse_special);
        (void)t.decode(ids);
        // The same bytes read as ids, including negative and out-of-range ones: decode must refuse, not crash.
        std::vector<int32_t> raw((size - 1) / 4);
        if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * 4);
        try {
            (void)t.decode(raw);
        } catch (const mk::Error&) {
        }
        mk::StreamDecoder stream(t);
        for (int32_t id : ids) (void)stream.push(id);
        (void)stream.flush();
    } catch (const mk::Error&) {
    }
    return 0;
}

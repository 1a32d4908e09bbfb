// Fuzz target: GgufFile::parse on arbitrary bytes, then what mk reads from a parsed file — typed getters,
// tensor views, the model config, the tokenizer and the chat template. mk::Error is a correct refusal.
#include <cstdint>

#include "models/chat_template.hpp"
#include "models/config.hpp"
#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/tokenizer.hpp"

namespace {

template <typename Body>
void refusal_ok(Body&& body) {
    try {
        body();
    } catch (const mk::Error&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    refusal_ok([&] {
        const mk::GgufFile file = mk::GgufFile::parse(data, size, "fuzz.gguf");
        for (const auto& entry : file.metadata()) {
            const mk::GgufValue& value = entry.second;
            refusal_ok([&] { (void)value.as_u64(); });
            refusal_ok([&] { (void)value.as_i64(); });
            refusal_ok([&] { (void)value.as_f64(); });
            refusal_ok([&] { (void)value.as_string(); });
        }
        for (const auto& info : file.tensors()) refusal_ok([&] { (void)file.tensor(info.name); });
        refusal_ok([&] { (void)mk::config_from_gguf(file); });
        refusal_ok([&] {
            const mk::Tokenizer tokenizer = mk::Tokenizer::from_gguf(file);
            const std::vector<int32_t> ids = tokenizer.encode("Hello <|im_start|> world 123!");
            (void)tokenizer.decode(ids);
        });
        refusal_ok([&] { (void)mk::ChatTemplate::from_gguf(file); });
    });
    return 0;
}

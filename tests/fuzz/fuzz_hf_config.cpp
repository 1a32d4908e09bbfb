// Fuzz target: config_from_hf_json on arbitrary text (an HF config.json). mk::Error is a correct
// refusal; a crash, an escaping nlohmann exception or a sanitizer report is a bug.
#include <cstdint>
#include <string_view>

#include "models/config.hpp"
#include "models/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        (void)mk::config_from_hf_json(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const mk::Error&) {
    }
    return 0;
}

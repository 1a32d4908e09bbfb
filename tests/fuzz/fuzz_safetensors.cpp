// Fuzz target: SafetensorsFile::parse on arbitrary bytes (8-byte header length, JSON header, data),
// then a view of every tensor it lists. mk::Error is a correct refusal; anything else is a bug.
#include <cstdint>

#include "models/error.hpp"
#include "models/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const mk::SafetensorsFile file = mk::SafetensorsFile::parse(data, size, "fuzz.safetensors");
        for (const auto& info : file.tensors()) {
            try {
                (void)file.tensor(info.name);
            } catch (const mk::Error&) {
            }
        }
    } catch (const mk::Error&) {
    }
    return 0;
}

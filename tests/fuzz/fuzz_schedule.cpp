// Fuzz target: parse_schedule on arbitrary bytes, then verify() on whatever parses. The trailing FNV-1a
// checksum is recomputed first, so mutations reach the body parser instead of dying at the checksum.
#include <cstdint>
#include <cstring>
#include <vector>

#include "models/error.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    if (bytes.size() >= 8) {
        uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64, as the .mks format defines it
        for (size_t i = 0; i + 8 < bytes.size(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
        std::memcpy(bytes.data() + bytes.size() - 8, &h, 8);  // little-endian host
    }
    try {
        const mk::Schedule schedule = mk::parse_schedule(bytes.data(), bytes.size(), "fuzz.mks");
        mk::VerifyOptions options;
        options.max_errors = 8;
        (void)mk::verify(schedule, options);
    } catch (const mk::Error&) {
    }
    return 0;
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based
// generator, so a draw depends only on (seed, counter) and every backend draws the same number.
#pragma once
#include <cstdint>

#include "instructions/encoding.hpp"

namespace mk {

struct Philox4 {
    uint32_t v[4];
};

MK_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 counter, uint64_t key) {
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = uint64_t(0xD2511F53u) * counter.v[0];
        const uint64_t p1 = uint64_t(0xCD9E8D57u) * counter.v[2];
        counter = {{uint32_t(p1 >> 32) ^ counter.v[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ counter.v[3] ^ k1,
                    uint32_t(p0)}};
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return counter;
}

// A uniform double in [0, 1) for draw `index` of step `step` under `seed` (53 random bits).
MK_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t step, uint32_t index = 0) {
    Philox4 out = philox4x32_10({{uint32_t(step), uint32_t(step >> 32), index, 0x6d6b0000u}}, seed);
    uint64_t bits = (uint64_t(out.v[0]) << 21) ^ (uint64_t(out.v[1]) >> 11) ^ (uint64_t(out.v[1]) << 32);
    bits &= (uint64_t(1) << 53) - 1;
    return double(bits) * (1.0 / double(uint64_t(1) << 53));
}

}  // namespace mk

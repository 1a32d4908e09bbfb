// The emulated twin of the warp-level tensor-core MMA of the PTX seam (instructions/common/ptx.cuh):
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, D = A * B + C for one warp, each lane's
// fragments placed as the PTX ISA lays them out ("Matrix Fragments for mma.m16n8k16 with floating point type").
// With g = lane / 4 and t = lane % 4 (the low half of a register is the lower column or row):
//   A (16 x 16, row major): a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]
//                           a[2] = A[g][2t+8, 2t+9]  a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, k by n):     b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32):     c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// Every lane of the warp must take part (it is a collective: the lanes' fragments meet in one warp exchange). Products of
// bf16 or f16 values are exact in fp32; by default the twin adds them in k order onto c in fp32, rounding each sum to
// nearest. The hardware's order and internal rounding are not specified, so the two agree to fp32 rounding, not bit
// for bit. MmaSums::truncated models what published measurements of tensor cores describe instead (Fasi, Higham,
// Mikaitis, Pranesh 2021, "Numerical behavior of NVIDIA tensor cores"): the 16 products and c aligned to the largest
// one's exponent, each cut toward zero to fp32's 24 bits below it, summed exactly, the sum cut toward zero to fp32.
// Its error is up to 17 units in the last place of the largest term from the terms (each toward zero: of either sign
// where the terms' signs differ) plus the sum's own cut (up to 32 such units where it is 2^5 larger): the op tests run
// the device code in both modes so a tolerance that holds only with rounded sums shows before a GPU does.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>
#include "mk_emu/device.hpp"

namespace mk_emu {

enum class MmaInput : uint32_t { bf16, f16 };

enum class MmaSums : uint32_t { rounded, truncated };
// The emulator's mode for every MMA (set between launches: the op test's second emulated backend).
inline MmaSums& mma_sums() {
    static MmaSums mode = MmaSums::rounded;
    return mode;
}

// c + sum(products) as MmaSums::truncated describes: exact in double (17 terms of 24 bits within 2^5 of the
// largest fit its 53), every term and the sum cut toward zero. A NaN or infinite term gives the IEEE sum.
inline float truncated_sum(float c, const float (&products)[16]) {
    double terms[17];
    terms[0] = c;
    bool finite = std::isfinite(c);
    for (uint32_t k = 0; k < 16; ++k) terms[k + 1] = products[k], finite = finite && std::isfinite(products[k]);
    if (!finite) {
        float acc = c;
        for (uint32_t k = 0; k < 16; ++k) acc += products[k];
        return acc;
    }
    int e_max = INT32_MIN;
    for (double t : terms)
        if (t != 0.0) e_max = std::max(e_max, std::ilogb(t));
    if (e_max == INT32_MIN) return 0.0f;
    const double quantum = std::ldexp(1.0, e_max - 23);  // the largest term's last place in fp32
    double sum = 0.0;
    for (double t : terms) sum += std::trunc(t / quantum) * quantum;
    if (sum == 0.0) return 0.0f;
    const double last = std::ldexp(1.0, std::max(std::ilogb(sum) - 23, -149));  // the sum's last place in fp32
    return float(std::trunc(sum / last) * last);
}

inline float mma_input_to_f32(MmaInput type, uint16_t bits) {
    if (type == MmaInput::f16) return __half2float(__ushort_as_half(bits));
    const uint32_t word = uint32_t(bits) << 16;
    float v;
    std::memcpy(&v, &word, 4);
    return v;
}

inline void mma_m16n8k16(MmaInput type, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                         const float (&c)[4], Where where) {
    const dim3 t3 = thread_idx(), dims = block_dim();
    const uint32_t lane = (t3.x + dims.x * (t3.y + dims.y * t3.z)) % 32;
    float A[16][16], B[16][8];  // the warp's whole operands, gathered from every lane's fragments
    auto half = [&](uint32_t reg, uint32_t k) { return mma_input_to_f32(type, uint16_t(reg >> (16 * k))); };
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    uint32_t all[32][6];
    warp_exchange(mine, sizeof(mine), all, where);
    for (uint32_t src = 0; src < 32; ++src) {
        const uint32_t g = src / 4, t = src % 4;
        for (uint32_t r = 0; r < 4; ++r)
            for (uint32_t k = 0; k < 2; ++k) A[g + 8 * (r % 2)][2 * t + k + 8 * (r / 2)] = half(all[src][r], k);
        for (uint32_t r = 0; r < 2; ++r)
            for (uint32_t k = 0; k < 2; ++k) B[2 * t + k + 8 * r][g] = half(all[src][4 + r], k);
    }
    const uint32_t g = lane / 4, t = lane % 4;
    for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t row = g + 8 * (i / 2), col = 2 * t + i % 2;
        if (mma_sums() == MmaSums::truncated) {
            float products[16];
            for (uint32_t k = 0; k < 16; ++k) products[k] = A[row][k] * B[k][col];
            d[i] = truncated_sum(c[i], products);
            continue;
        }
        float acc = c[i];
        for (uint32_t k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
        d[i] = acc;
    }
}

}  // namespace mk_emu

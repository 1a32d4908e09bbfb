// Portable integer-activation kernels of the q16 fast mode (quant_q16.cpp), templated on the activation block:
// one template over the activation block type, whose only difference is the integer width and range.
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

namespace mk::quant::int_scalar {

// Blocks of 32 values quantized to [-kLevels, kLevels] by round-to-nearest-even (the AVX2
// quantizers round the same products the same way, so both give identical blocks).
template <typename Block, int kLevels>
void quantize(const float* x, int64_t n, Block* out) {
    using Int = std::remove_cvref_t<decltype(out->q[0])>;
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float id = amax > 0 ? kLevels / amax : 0;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const int q = int(std::nearbyint(xb[i] * id));
            out[b].q[i] = Int(q);
            sum += q;
        }
        out[b].d = amax / kLevels;
        out[b].sum = out[b].d * float(sum);
    }
}

// Block sums fit int32 for both widths: 32 * 128 * 32767 < 2^28.
template <typename Block>
float dot_q8_0(const uint8_t* row, const Block* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q8_0::kBytes;
        int sumi = 0;
        for (int i = 0; i < 32; ++i) sumi += int(int8_t(w[2 + i])) * xq[b].q[i];
        acc += load_f16(w) * xq[b].d * float(sumi);
    }
    return acc;
}

template <typename Block>
float dot_q4_0(const uint8_t* row, const Block* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_0::kBytes;
        const auto* q = xq[b].q;
        int sumi = 0;
        for (int j = 0; j < 16; ++j) sumi += ((w[2 + j] & 0xf) - 8) * q[j] + ((w[2 + j] >> 4) - 8) * q[j + 16];
        acc += load_f16(w) * xq[b].d * float(sumi);
    }
    return acc;
}

// Q4_1 value = q * d + m, so the dot is d * dx * sum(q * qx) + m * (dx * sum(qx)), the last factor
// being the block's precomputed `sum`.
template <typename Block>
float dot_q4_1(const uint8_t* row, const Block* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_1::kBytes;
        const auto* q = xq[b].q;
        int sumi = 0;
        for (int j = 0; j < 16; ++j) sumi += (w[4 + j] & 0xf) * q[j] + (w[4 + j] >> 4) * q[j + 16];
        acc += load_f16(w) * xq[b].d * float(sumi) + load_f16(w + 2) * xq[b].sum;
    }
    return acc;
}

}  // namespace mk::quant::int_scalar

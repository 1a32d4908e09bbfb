// Accurate fast mode, portable scalar: activations quantized to 16-bit BlockQ16 and integer dots
// against Q8_0, Q4_0 and Q4_1 weights. The fallback and reference for quant_avx2_q16.cpp.
#include <algorithm>
#include <cmath>

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

namespace mk::quant {

namespace {

// As quantize_q8 (quant_q8.cpp) with 32767 levels a side; the AVX2 quantizer gives identical blocks.
void quantize_q16(const float* x, int64_t n, BlockQ16* out) {
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float id = amax > 0 ? 32767 / amax : 0;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const int q = int(std::nearbyint(xb[i] * id));
            out[b].q[i] = int16_t(q);
            sum += q;
        }
        out[b].d = amax / 32767;
        out[b].sum = out[b].d * float(sum);
    }
}

// Block sums fit int32: 32 * 128 * 32767 < 2^28.
float dot_q8_0(const uint8_t* row, const BlockQ16* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q8_0::kBytes;
        int sumi = 0;
        for (int i = 0; i < 32; ++i) sumi += int(int8_t(w[2 + i])) * xq[b].q[i];
        acc += load_f16(w) * xq[b].d * float(sumi);
    }
    return acc;
}

float dot_q4_0(const uint8_t* row, const BlockQ16* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_0::kBytes;
        const int16_t* q = xq[b].q;
        int sumi = 0;
        for (int j = 0; j < 16; ++j) sumi += ((w[2 + j] & 0xf) - 8) * q[j] + ((w[2 + j] >> 4) - 8) * q[j + 16];
        acc += load_f16(w) * xq[b].d * float(sumi);
    }
    return acc;
}

float dot_q4_1(const uint8_t* row, const BlockQ16* xq, int64_t n) {
    float acc = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_1::kBytes;
        const int16_t* q = xq[b].q;
        int sumi = 0;
        for (int j = 0; j < 16; ++j) sumi += (w[4 + j] & 0xf) * q[j] + (w[4 + j] >> 4) * q[j + 16];
        acc += load_f16(w) * xq[b].d * float(sumi) + load_f16(w + 2) * xq[b].sum;
    }
    return acc;
}

}  // namespace

void add_scalar_q16(CpuKernels& k) {
    k.quantize_q16 = quantize_q16;
    k.dot_q16[slot(DType::Q8_0)] = dot_q8_0;
    k.dot_q16[slot(DType::Q4_0)] = dot_q4_0;
    k.dot_q16[slot(DType::Q4_1)] = dot_q4_1;
}

}  // namespace mk::quant

// Fast mode, portable scalar: activations quantized to BlockQ8 and integer dots against the weights'
// own integers (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K). The fallback and reference for quant_avx2_q8.cpp.
#include <algorithm>
#include <cmath>

#include "models/quant_formats.hpp"
#include "models/quant_int_scalar.hpp"
#include "models/quant_kernels.hpp"

namespace mk::quant {

namespace {

// Q4_K sub-block j lines up with activation block 8 * super-block + j.
float dot_q4_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    float acc = 0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q4_K::kBytes;
        const float d = load_f16(w), dmin = load_f16(w + 2);
        for (int j = 0; j < 8; ++j) {
            const BlockQ8& x = xq[8 * sb + j];
            const ScaleMin sm = unpack_scale_min(w + 4, j);
            const uint8_t* qs = w + 16 + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int sumi = 0;
            for (int l = 0; l < 32; ++l) sumi += ((qs[l] >> shift) & 0xf) * x.q[l];
            acc += d * float(sm.scale) * x.d * float(sumi) - dmin * float(sm.min) * x.sum;
        }
    }
    return acc;
}

// Q6_K group k (values 32k..32k+31 of a super-block) lines up with activation block 8 * sb + k; its
// two 16-value halves have their own int8 scales, applied in integers.
float dot_q6_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    float acc = 0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q6_K::kBytes;
        const uint8_t* ql = w;
        const uint8_t* qh = w + 128;
        const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
        const float d = load_f16(w + 208);
        for (int k = 0; k < 8; ++k) {
            const BlockQ8& x = xq[8 * sb + k];
            const int half = k / 4, g = k % 4;
            int sumi[2] = {0, 0};
            for (int l = 0; l < 32; ++l) {
                const int low = (ql[64 * half + 32 * (g % 2) + l] >> (g < 2 ? 0 : 4)) & 0xf;
                const int high = (qh[32 * half + l] >> (2 * g)) & 3;
                sumi[l / 16] += ((low | (high << 4)) - 32) * x.q[l];
            }
            acc += d * x.d * float(scales[2 * k] * sumi[0] + scales[2 * k + 1] * sumi[1]);
        }
    }
    return acc;
}

}  // namespace

void add_scalar_q8(CpuKernels& k) {
    k.quantize_q8 = int_scalar::quantize<BlockQ8, 127>;
    k.dot_q8[slot(DType::Q8_0)] = int_scalar::dot_q8_0<BlockQ8>;
    k.dot_q8[slot(DType::Q4_0)] = int_scalar::dot_q4_0<BlockQ8>;
    k.dot_q8[slot(DType::Q4_1)] = int_scalar::dot_q4_1<BlockQ8>;
    k.dot_q8[slot(DType::Q4_K)] = dot_q4_k;
    k.dot_q8[slot(DType::Q6_K)] = dot_q6_k;
}

}  // namespace mk::quant

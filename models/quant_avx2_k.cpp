// Exact-mode AVX2 dots for the K-quant super-blocks (Q4_K, Q6_K): each 32-value group of quants is
// unpacked to bytes in value order, converted 8 at a time to fp32 and multiplied into fp32 lanes.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Sub-block j of a Q4_K super-block: value = (d * scale_j) * q - dmin * min_j, dequantized with one
// FMA per lane (as the scalar kernel does), one accumulator per 8-value chunk.
MK_AVX2 float dot_q4_k(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q4_K::kBytes;
        const float d = f16_at(w), dmin = f16_at(w + 2);
        for (int c = 0; c < 4; ++c) {
            // 32 bytes carry sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * c + h;
                const ScaleMin sm = unpack_scale_min(w + 4, j);
                const __m256 scale = _mm256_set1_ps(d * float(sm.scale)), offset = _mm256_set1_ps(dmin * float(sm.min));
                const __m256i q = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, low4);
                const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
                const float* xb = x + sb * 256 + 32 * j;
                acc0 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(q_lo), scale, offset), loadu(xb), acc0);
                acc1 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(high64(q_lo)), scale, offset), loadu(xb + 8), acc1);
                acc2 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(q_hi), scale, offset), loadu(xb + 16), acc2);
                acc3 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(high64(q_hi)), scale, offset), loadu(xb + 24), acc3);
            }
        }
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

// Q6_K group k = 4 * half + g holds values 32k..32k+31 (layout in quant_formats.hpp). Each 16-value
// half has its own int8 scale, applied to that half's sum of q * x.
MK_AVX2 float dot_q6_k(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q6_K::kBytes;
        const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
        const float d = f16_at(w + 208);
        for (int half = 0; half < 2; ++half) {
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
            for (int g = 0; g < 4; ++g) {
                const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * half + 32 * (g % 2)));
                const __m256i low = _mm256_and_si256(g < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
                const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), low2);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), bias);
                const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
                const int k = 4 * half + g;
                const float* xb = x + sb * 256 + 32 * k;
                const __m256 t0 = _mm256_fmadd_ps(i8_to_ps(high64(q_lo)), loadu(xb + 8), _mm256_mul_ps(i8_to_ps(q_lo), loadu(xb)));
                const __m256 t1 = _mm256_fmadd_ps(i8_to_ps(high64(q_hi)), loadu(xb + 24), _mm256_mul_ps(i8_to_ps(q_hi), loadu(xb + 16)));
                acc0 = _mm256_fmadd_ps(t0, _mm256_set1_ps(d * float(scales[2 * k])), acc0);
                acc1 = _mm256_fmadd_ps(t1, _mm256_set1_ps(d * float(scales[2 * k + 1])), acc1);
            }
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

void add_avx2_k_dots(CpuKernels& k) {
    k.dot[slot(DType::Q4_K)] = dot_q4_k;
    k.dot[slot(DType::Q6_K)] = dot_q6_k;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_k_dots(CpuKernels&) {}
}  // namespace mk::quant

#endif

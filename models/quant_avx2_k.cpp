// Exact-mode AVX2 dots for the K-quant super-blocks (Q4_K, Q6_K): each 32-value group of quants is
// unpacked to bytes in value order, converted 8 at a time to fp32 and multiplied into fp32 lanes.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Lanes += (q * scale - offset) * x for the 32 values of q (bytes 0..15, in value order): the
// weights dequantized with one FMA (as the scalar kernel), one accumulator per 8-value chunk.
struct Acc4 {
    __m256 a0, a1, a2, a3;
};

MK_AVX2 inline void q4_k_sub(Acc4& acc, __m256i q, __m256 scale, __m256 offset, const float* x) {
    const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
    acc.a0 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(q_lo), scale, offset), loadu(x), acc.a0);
    acc.a1 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(high64(q_lo)), scale, offset), loadu(x + 8), acc.a1);
    acc.a2 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(q_hi), scale, offset), loadu(x + 16), acc.a2);
    acc.a3 = _mm256_fmadd_ps(_mm256_fmsub_ps(u8_to_ps(high64(q_hi)), scale, offset), loadu(x + 24), acc.a3);
}

// Sub-block j of a Q4_K super-block: value = (d * scale_j) * q - dmin * min_j.
MK_AVX2 float dot_q4_k(const uint8_t* row, const float* x, int64_t n) {
    Acc4 acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q4_K::kBytes;
        const float d = f16_at(w), dmin = f16_at(w + 2);
        uint64_t scales, mins;
        unpack_scale_mins(w + 4, scales, mins);
        const float* xs = x + sb * 256;
        for (int c = 0; c < 4; ++c) {  // 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
            const int j = 2 * c;
            q4_k_sub(acc, _mm256_and_si256(raw, low4), _mm256_set1_ps(d * float((scales >> (8 * j)) & 63)),
                     _mm256_set1_ps(dmin * float((mins >> (8 * j)) & 63)), xs + 32 * j);
            q4_k_sub(acc, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4), _mm256_set1_ps(d * float((scales >> (8 * j + 8)) & 63)),
                     _mm256_set1_ps(dmin * float((mins >> (8 * j + 8)) & 63)), xs + 32 * (j + 1));
        }
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc.a0, acc.a1), _mm256_add_ps(acc.a2, acc.a3)));
}

// Q6_K group k = 4 * half + G holds values 32k..32k+31 (layout in quant_formats.hpp): low 4 bits
// from ql, top 2 from bits 2G..2G+1 of qh, minus 32. Each 16-value half has its own int8 scale,
// applied to that half's sum of q * x. G is a template argument so every shift is an immediate.
template <int G>
MK_AVX2 inline void q6_k_group(__m256& acc0, __m256& acc1, const uint8_t* ql, __m256i qh, const int8_t* scales, float d,
                               const float* x) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32 * (G % 2)));
    const __m256i low = _mm256_and_si256(G < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(G < 2 ? _mm256_slli_epi16(qh, 4 - 2 * G) : _mm256_srli_epi16(qh, 2 * G - 4),
                                          _mm256_set1_epi8(0x30));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
    const __m256 t0 = _mm256_fmadd_ps(i8_to_ps(high64(q_lo)), loadu(x + 8), _mm256_mul_ps(i8_to_ps(q_lo), loadu(x)));
    const __m256 t1 = _mm256_fmadd_ps(i8_to_ps(high64(q_hi)), loadu(x + 24), _mm256_mul_ps(i8_to_ps(q_hi), loadu(x + 16)));
    acc0 = _mm256_fmadd_ps(t0, _mm256_set1_ps(d * float(scales[2 * G])), acc0);
    acc1 = _mm256_fmadd_ps(t1, _mm256_set1_ps(d * float(scales[2 * G + 1])), acc1);
}

MK_AVX2 float dot_q6_k(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q6_K::kBytes;
        const float d = f16_at(w + 208);
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = w + 64 * half;
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
            const auto* scales = reinterpret_cast<const int8_t*>(w + 192 + 8 * half);
            const float* xs = x + sb * 256 + 128 * half;
            q6_k_group<0>(acc0, acc1, ql, qh, scales, d, xs);
            q6_k_group<1>(acc0, acc1, ql, qh, scales, d, xs + 32);
            q6_k_group<2>(acc0, acc1, ql, qh, scales, d, xs + 64);
            q6_k_group<3>(acc0, acc1, ql, qh, scales, d, xs + 96);
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

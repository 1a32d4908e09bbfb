// Accurate fast-mode AVX2 kernels: the BlockQ16 activation quantizer and pmaddwd dots (i16 x i16
// pairs summed to i32, exact) for Q8_0, Q4_0 and Q4_1 weights widened to 16 bits.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Same arithmetic as the scalar quantizer (quant_q16.cpp), so the blocks are identical.
MK_AVX2 void quantize_q16(const float* x, int64_t n, BlockQ16* out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        const __m256 v0 = loadu(xb), v1 = loadu(xb + 8), v2 = loadu(xb + 16), v3 = loadu(xb + 24);
        const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3));
        const float amax = hmax(_mm256_max_ps(m01, m23));
        const __m256 id = _mm256_set1_ps(amax > 0 ? 32767 / amax : 0);
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
        const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        // packs interleaves the 128-bit lanes; the 64-bit permute puts values back in order.
        const __m256i q01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xd8);
        const __m256i q23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), q01);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q + 16), q23);
        out[b].d = amax / 32767;
        out[b].sum = out[b].d * float(sum);
    }
}

// Eight i32 lanes of sum(a * b) over two 16-value halves. Pair sums stay below 2 * 128 * 32767.
MK_AVX2 inline __m256 dot_i16(__m256i a0, __m256i a1, const BlockQ16& x) {
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(a0, load32(x.q)), _mm256_madd_epi16(a1, load32(x.q + 16)));
    return _mm256_cvtepi32_ps(p);
}

// 16 bytes of nibbles widened to words (byte j -> word j): the low nibbles are values 0-15, the
// high ones (already alone in the word's low byte) values 16-31.
MK_AVX2 inline void nibbles_i16(const uint8_t* p, __m256i& lo, __m256i& hi) {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_and_si256(words, _mm256_set1_epi16(0x0f));
    hi = _mm256_srli_epi16(words, 4);
}

struct StepQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr float kOffsetScale = 0;
    MK_AVX2 static void step(__m256& acc, __m128&, const uint8_t* w, const BlockQ16& x) {
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
        acc = _mm256_fmadd_ps(dot_i16(w0, w1, x), block_scale(w, x), acc);
    }
};

// Q4_0 value = (q - 8) * d: q unsigned in the lanes, -8 * d * (activation sum) in the offset.
struct StepQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr float kOffsetScale = -8;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ16& x) {
        __m256i lo, hi;
        nibbles_i16(w + 2, lo, hi);
        const __m128 s = scales_d_d(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_i16(lo, hi, x), _mm256_broadcastss_ps(s), acc);
    }
};

// Q4_1 value = q * d + m: d * dx * sum(q * qx) in the lanes, m * (activation sum) in the offset.
struct StepQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr float kOffsetScale = 1;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ16& x) {
        __m256i lo, hi;
        nibbles_i16(w + 4, lo, hi);
        const __m128 s = scales_d_m(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_i16(lo, hi, x), _mm256_broadcastss_ps(s), acc);
    }
};

}  // namespace

void add_avx2_q16(CpuKernels& k) {
    k.quantize_q16 = quantize_q16;
    k.dot_q16[slot(DType::Q8_0)] = dot_blocks<StepQ8_0, BlockQ16>;
    k.dot_q16[slot(DType::Q4_0)] = dot_blocks<StepQ4_0, BlockQ16>;
    k.dot_q16[slot(DType::Q4_1)] = dot_blocks<StepQ4_1, BlockQ16>;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_q16(CpuKernels&) {}
}  // namespace mk::quant

#endif

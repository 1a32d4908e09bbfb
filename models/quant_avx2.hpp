// Internal to quant_avx2*.cpp: AVX2 helpers. Every function carries MK_AVX2 (a target attribute), so
// the rest of the build stays baseline x86-64, and has internal linkage, so no AVX2 copy of an inline
// function can stand in for a baseline one at link time.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define MK_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace mk::quant::avx2 {
namespace {

// Lanes summed in a fixed tree, ((0+4)+(2+6)) + ((1+5)+(3+7)), so results repeat run to run.
MK_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

MK_AVX2 inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

MK_AVX2 inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

// A block's f16 scale; blocks sit at any byte offset, hence memcpy.
MK_AVX2 inline float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// The low 8 bytes of v as 8 float lanes, signed or unsigned.
MK_AVX2 inline __m256 i8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
MK_AVX2 inline __m256 u8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

MK_AVX2 inline __m128i high64(__m128i v) { return _mm_unpackhi_epi64(v, v); }
MK_AVX2 inline __m128i load64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

MK_AVX2 inline __m256 loadu(const float* p) { return _mm256_loadu_ps(p); }

// 16 bytes of nibbles as 32 bytes 0..15 in value order: low nibbles (values 0-15), then high ones.
// A broadcast load and a per-lane variable shift keep this off the shuffle port (vinserti128).
MK_AVX2 inline __m256i unpack_nibbles(const uint8_t* p) {
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

// 16 bytes of nibbles widened to words (byte j -> word j): the low nibbles are values 0-15, the
// high ones (already alone in the word's low byte) values 16-31.
MK_AVX2 inline void nibble_words(const uint8_t* p, __m256i& lo, __m256i& hi) {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_and_si256(words, _mm256_set1_epi16(0x0f));
    hi = _mm256_srli_epi16(words, 4);
}

MK_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// [x.d, x.sum, 0, 0]: an activation block's two scales, adjacent at the start of BlockQ16.
template <typename X>
MK_AVX2 inline __m128 act_scales(const X& x) {
    return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&x.d)));
}

// Lane 0 = the weight block's f16 d (its first 2 bytes) times the activations' d; one conversion
// from memory (8 bytes read; every block is longer), the other lanes unused and never multiplied.
template <typename X>
MK_AVX2 inline __m256 block_scale(const uint8_t* w, const X& x) {
    const __m128 d = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w)));
    return _mm256_broadcastss_ps(_mm_mul_ss(d, act_scales(x)));
}

// [d * dx, d * sum, 0, 0] for a weight block that starts with its f16 d (Q4_0: value (q - 8) d,
// whose offset term is -8 d sum).
template <typename X>
MK_AVX2 inline __m128 scales_d_d(const uint8_t* w, const X& x) {
    uint16_t d;
    std::memcpy(&d, w, 2);
    return _mm_mul_ps(_mm_moveldup_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d))), act_scales(x));
}

// [d * dx, m * sum, 0, 0] for a weight block that starts with f16 d, f16 m (Q4_1: value q d + m):
// both convert at once and multiply [dx, sum] in one go.
template <typename X>
MK_AVX2 inline __m128 scales_d_m(const uint8_t* w, const X& x) {
    uint32_t dm;
    std::memcpy(&dm, w, 4);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(int(dm))), act_scales(x));
}

// The integer-dot driver (the q16 mode). Each format's step K::step adds one 32-value block's
// dot to `acc` (lanes) and, for formats with an offset term, the block's offset to lane 1 of
// `offset` (scaled by K::kOffsetScale at the end). Two pairs of accumulators alternate so a block
// need not wait on the previous block's FMA latency: Q4_1 19.2 -> 21.6 GB/s, Q8_0 32 -> 35 (in the
// since-removed q8 mode; mk_dot_bench --formats Q4_1,Q8_0 --cols 576, 3072 rows, cache-hot).
template <typename K, typename X>
MK_AVX2 inline float dot_blocks(const uint8_t* row, const X* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    __m128 offset0 = _mm_setzero_ps(), offset1 = offset0;
    const int64_t n_blocks = n / 32;
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
        K::step(acc0, offset0, row + b * K::kBytes, xq[b]);
        K::step(acc1, offset1, row + (b + 1) * K::kBytes, xq[b + 1]);
    }
    if (b < n_blocks) K::step(acc0, offset0, row + b * K::kBytes, xq[b]);
    const __m128 offset = _mm_add_ps(offset0, offset1);
    return hsum(_mm256_add_ps(acc0, acc1)) + K::kOffsetScale * _mm_cvtss_f32(_mm_movehdup_ps(offset));
}

}  // namespace
}  // namespace mk::quant::avx2

#endif

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
MK_AVX2 inline __m256i unpack_nibbles(const uint8_t* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

}  // namespace
}  // namespace mk::quant::avx2

#endif

// The prefill tile kernel on AVX-512 VNNI: a staged tile of Q8_0 / Q4_0 / Q4_1 weight rows against a chunk's q16
// activation columns, interleaved by token (Q16Columns), 4 rows x 32 columns per pass. The tile's rows are decoded
// to aligned words once; a weight pair, broadcast, meets 16 tokens' pairs in one vpdpwssd, so a block's 32
// products sum in integers for 16 tokens in 16 instructions, and only then are converted and scaled (d_w times
// the 16 tokens' d, and Q4's offset m or -8 d times their block sums): ~1.2 instructions per 32 products, where a
// block-per-zmm pmaddwd kernel spent 3 (pmaddwd, convert, FMA).
#include <algorithm>
#include <cstring>
#include <vector>

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"
#include "models/quant_tile.hpp"

#if defined(__x86_64__) || defined(__i386__)

// GCC 12's _mm512_undefined_ps (a self-initialized variable) trips -Wuninitialized once inlined here.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace mk::quant {

namespace avx512 {
namespace {

MK_AVX512 inline float f16_scale(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// A block's 16 nibble bytes as 32 words in value order: byte j's low nibble is value j, its high one value j + 16.
MK_AVX512 inline __m512i nibble_words(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(bytes, mask)),
                                                 _mm_and_si128(_mm_srli_epi16(bytes, 4), mask), 1);
    return _mm512_cvtepu8_epi16(both);
}

// Per format: the block's 32 integer values as words, its scale d, and the offset o such that
// value = q * d + o (Q8_0: 0; Q4_0: -8 d; Q4_1: m).
struct TileQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr bool kOffset = false;
    MK_AVX512 static __m512i words(const uint8_t* w) {
        return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2)));
    }
    MK_AVX512 static float scale(const uint8_t* w) { return f16_scale(w); }
    static float offset(const uint8_t*) { return 0; }
};
struct TileQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr bool kOffset = true;
    MK_AVX512 static __m512i words(const uint8_t* w) { return nibble_words(w + 2); }
    MK_AVX512 static float scale(const uint8_t* w) { return f16_scale(w); }
    MK_AVX512 static float offset(const uint8_t* w) { return -8 * f16_scale(w); }
};
struct TileQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr bool kOffset = true;
    MK_AVX512 static __m512i words(const uint8_t* w) { return nibble_words(w + 4); }
    MK_AVX512 static float scale(const uint8_t* w) { return f16_scale(w); }
    MK_AVX512 static float offset(const uint8_t* w) { return f16_scale(w + 2); }
};

constexpr uint32_t kRows = 4;

// The tile's rows decoded once (64-byte aligned words for the aligned 512-bit loads).
template <typename W>
MK_AVX512 const int16_t* decode_rows(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, int64_t n,
                                     tile::DecodedRows& t) {
    const int64_t nb = n / 32;
    int16_t* words = t.resize(n_rows, n, 64);
    for (uint32_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* w = rows + r * row_bytes + b * W::kBytes;
            _mm512_store_si512(words + r * n + b * 32, W::words(w));
            t.row_scale[r * nb + b] = W::scale(w);
            if constexpr (W::kOffset) t.row_offset[r * nb + b] = W::offset(w);
        }
    return words;
}

MK_AVX512 inline __m512i pair_at(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// Rows w[0..4) (a row past the tile repeats the last; its results are dropped) against two groups of 16 columns
// (q0/d0/s0 and q1/d1/s1, Q16Columns' layout at one group each): acc[2 i + g] lane t = row i . column t of group g.
// Per block, each row's 16 value pairs are broadcast and vpdpwssd'd into 8 integer accumulators (8 independent
// chains for its 5-cycle latency), then converted and scaled once: d_w (broadcast) x the 16 columns' d.
template <bool kOffset>
MK_AVX512 void rows_x32(const int16_t* const* w, const float* const* row_scale, const float* const* row_offset,
                        const int16_t* q0, const int16_t* q1, const float* d0, const float* d1, const float* s0,
                        const float* s1, int64_t nb, __m512* acc) {
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m512i sum[8];
        for (int i = 0; i < 8; ++i) sum[i] = _mm512_setzero_si512();
        const int16_t *x0 = q0 + b * 512, *x1 = q1 + b * 512;
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) {
            const __m512i a = _mm512_load_si512(x0 + 32 * p), c = _mm512_load_si512(x1 + 32 * p);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                const __m512i wp = pair_at(w[i] + b * 32 + 2 * p);
                sum[2 * i] = _mm512_dpwssd_epi32(sum[2 * i], a, wp);
                sum[2 * i + 1] = _mm512_dpwssd_epi32(sum[2 * i + 1], c, wp);
            }
        }
        const __m512 dx0 = _mm512_loadu_ps(d0 + b * 16), dx1 = _mm512_loadu_ps(d1 + b * 16);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            const __m512 dw = _mm512_set1_ps(row_scale[i][b]);
            acc[2 * i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[2 * i]), _mm512_mul_ps(dw, dx0), acc[2 * i]);
            acc[2 * i + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[2 * i + 1]), _mm512_mul_ps(dw, dx1), acc[2 * i + 1]);
            if constexpr (kOffset) {
                const __m512 off = _mm512_set1_ps(row_offset[i][b]);
                acc[2 * i] = _mm512_fmadd_ps(off, _mm512_loadu_ps(s0 + b * 16), acc[2 * i]);
                acc[2 * i + 1] = _mm512_fmadd_ps(off, _mm512_loadu_ps(s1 + b * 16), acc[2 * i + 1]);
            }
        }
    }
}

// out[r * n_cols + c] = row r . column c: 4 rows x 32 columns at a time, the columns' values read once per 4 rows.
template <typename W>
MK_AVX512 void dot_tile(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols, float* out,
                        const uint8_t* next, uint64_t next_bytes) {
    const int64_t n = cols.n, nb = n / 32;
    const uint32_t n_cols = cols.n_cols;
    thread_local tile::DecodedRows t;
    const int16_t* words = decode_rows<W>(rows, n_rows, row_bytes, n, t);
    tile::NextTilePrefetch prefetch(next, next_bytes, uint64_t(cols.n_groups / 2) * ((n_rows + kRows - 1) / kRows));
    for (uint32_t g = 0; g < cols.n_groups; g += 2) {
        const int16_t *q0 = cols.q + g * nb * 512, *q1 = q0 + nb * 512;
        const float *d0 = cols.d + g * nb * 16, *d1 = d0 + nb * 16;
        const float *s0 = cols.sum + g * nb * 16, *s1 = s0 + nb * 16;
        for (uint32_t r = 0; r < n_rows; r += kRows) {
            prefetch.pass();
            const tile::PassRows<kRows> pass(words, t, r, n_rows, n);
            const uint32_t n_r = pass.count;
            __m512 acc[2 * kRows];
            rows_x32<W::kOffset>(pass.words, pass.scale, pass.offset, q0, q1, d0, d1, s0, s1, nb, acc);
            for (uint32_t i = 0; i < n_r; ++i)
                for (uint32_t h = 0; h < 2; ++h) {
                    const uint32_t c = (g + h) * 16;
                    if (c >= n_cols) continue;
                    const __mmask16 valid = n_cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n_cols - c)) - 1);
                    _mm512_mask_storeu_ps(out + (r + i) * n_cols + c, valid, acc[2 * i + h]);
                }
        }
    }
}

}  // namespace
}  // namespace avx512

void add_avx512_q16(CpuKernels& k) {
    k.dot_q16_tile[slot(DType::Q8_0)] = avx512::dot_tile<avx512::TileQ8_0>;
    k.dot_q16_tile[slot(DType::Q4_0)] = avx512::dot_tile<avx512::TileQ4_0>;
    k.dot_q16_tile[slot(DType::Q4_1)] = avx512::dot_tile<avx512::TileQ4_1>;
}

}  // namespace mk::quant

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else

namespace mk::quant {
void add_avx512_q16(CpuKernels&) {}
}  // namespace mk::quant

#endif

// The prefill tile kernel on AVX-512BW: a staged tile of Q8_0 / Q4_0 / Q4_1 weight rows against a chunk's q16
// activation columns (Q16Columns' split values), 4 rows x 4 columns per pass with 16 zmm accumulators. The tile's
// rows are decoded to aligned words once; a 32-value block is one zmm (pmaddwd: 32 i16 products summed in pairs,
// exact), so each (row, column, block) costs pmaddwd + convert + FMA. The block's scale d_w * d_x comes from a
// per-pass table (one multiply per 16 pairs), and Q4's offset term (m or -8 d, times the activation block's sum)
// is accumulated for the pass's 16 pairs beside it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

// GCC 12's _mm512_undefined_ps (a self-initialized variable) trips -Wuninitialized once inlined here.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

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

// sum_b a[b] * b_[b] over n values (Q4's offset term).
MK_AVX512 inline float dot_f32(const float* a, const float* b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    float sum = _mm512_reduce_add_ps(acc);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

constexpr uint32_t kRows = 4, kCols = 4;

// The tile's rows decoded once (64-byte aligned words, and per-block scales and offsets, each row contiguous) and a
// pass's d_w * d_x table (n_blocks, kRows * kCols): the passes then read aligned words whatever the format (a Q4
// block's unpacking per pass cost as much as its dots), and one base pointer serves a pass's 16 broadcasts.
// Thread-local: one tile per thread at a time.
struct Scratch {
    std::vector<int16_t> words;
    // (groups of 4 rows, nb, 4): 4 rows' scales and offsets side by side per block
    std::vector<float> row_scale, row_offset, row_scale4, row_offset4, pair_scale;
};

// table[b * 16 + 4 i + j] = row_scale4[b][i] * col_scale4[b][j]: 4 rows' and 4 columns' scales side by side per
// block (gathering them from row-major scales took a quarter of the kernel's time at K = 2048). With kOffset,
// returns lane 4 i + j = sum_b row_offset4[b][i] * col_sum4[b][j], Q4's offset term for the 16 pairs (one dot per
// pair over SmolLM2's 18 blocks took 6% of its prefill).
template <bool kOffset>
MK_AVX512 inline __m512 pair_scales(const float* row_scale4, const float* col_scale4, const float* row_offset4,
                                    const float* col_sum4, int64_t nb, float* table) {
    const __m512i row_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 offset = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m512 rows = _mm512_permutexvar_ps(row_lane, _mm512_broadcast_f32x4(_mm_loadu_ps(row_scale4 + b * 4)));
        _mm512_storeu_ps(table + b * 16, _mm512_mul_ps(rows, _mm512_broadcast_f32x4(_mm_loadu_ps(col_scale4 + b * 4))));
        if constexpr (kOffset) {
            const __m512 offsets = _mm512_permutexvar_ps(row_lane, _mm512_broadcast_f32x4(_mm_loadu_ps(row_offset4 + b * 4)));
            offset = _mm512_fmadd_ps(offsets, _mm512_broadcast_f32x4(_mm_loadu_ps(col_sum4 + b * 4)), offset);
        }
    }
    return offset;
}

// The sums of 16 vectors (a[4 i + j]) in one: lane 4 j + i holds sum(a[4 i + j]). A tree of shuffles and adds
// (~45 instructions instead of 16 reductions of ~8): a pass over a short row (SmolLM2's K = 576 is 18 blocks) paid
// a fifth of its time in them.
MK_AVX512 inline __m512 sum16(const __m512* a) {
    __m512 h[8], q[4], e[2];
    for (int k = 0; k < 8; ++k)  // [x0+x2, x1+x3, y0+y2, y1+y3] in 128-bit lanes, x = a[2k], y = a[2k + 1]
        h[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee));
    for (int k = 0; k < 4; ++k)  // lane l of 4: a[4k + l]'s four partial sums
        q[k] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], 0xdd));
    for (int k = 0; k < 2; ++k)  // lane l: [a[8k + l] (2 partials), a[8k + 4 + l] (2 partials)] interleaved
        e[k] = _mm512_add_ps(_mm512_unpacklo_ps(q[2 * k], q[2 * k + 1]), _mm512_unpackhi_ps(q[2 * k], q[2 * k + 1]));
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(e[0]), _mm512_castps_pd(e[1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(e[0]), _mm512_castps_pd(e[1]));
    return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));  // lane 4 l + m: a[4 m + l]
}

MK_AVX512 inline __m512 block_dot(__m512i w, __m512i x) { return _mm512_cvtepi32_ps(_mm512_madd_epi16(w, x)); }

// acc[4 i + j] += convert(w_i . x_j) * s[b][4 i + j] for row i of the pass, i < R.
#define MK_ROW_STEP(i)                                                                                        \
    if constexpr (R > i) {                                                                                    \
        const __m512i w = _mm512_load_si512(w##i + b * 32);                                                   \
        acc[4 * i + 0] = _mm512_fmadd_ps(block_dot(w, x0), _mm512_set1_ps(s[b * 16 + 4 * i + 0]), acc[4 * i + 0]); \
        acc[4 * i + 1] = _mm512_fmadd_ps(block_dot(w, x1), _mm512_set1_ps(s[b * 16 + 4 * i + 1]), acc[4 * i + 1]); \
        acc[4 * i + 2] = _mm512_fmadd_ps(block_dot(w, x2), _mm512_set1_ps(s[b * 16 + 4 * i + 2]), acc[4 * i + 2]); \
        acc[4 * i + 3] = _mm512_fmadd_ps(block_dot(w, x3), _mm512_set1_ps(s[b * 16 + 4 * i + 3]), acc[4 * i + 3]); \
    }

// Rows at w (R of them, n words apart) against the 4 columns at q (n words apart): out[4 j + i] = row i . column j
// (a row past R reads row R - 1 and its result is ignored). Each block of a column is loaded once for the R rows.
template <uint32_t R>
MK_AVX512 void pass(const int16_t* w, const int16_t* q, int64_t n, const float* s, float* out) {
    const int64_t nb = n / 32;
    const int16_t *w0 = w, *w1 = w + std::min<int64_t>(1, R - 1) * n, *w2 = w + std::min<int64_t>(2, R - 1) * n;
    const int16_t* w3 = w + std::min<int64_t>(3, R - 1) * n;
    __m512 acc[16];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m512i x0 = _mm512_load_si512(q + b * 32), x1 = _mm512_load_si512(q + n + b * 32);
        const __m512i x2 = _mm512_load_si512(q + 2 * n + b * 32), x3 = _mm512_load_si512(q + 3 * n + b * 32);
        MK_ROW_STEP(0)
        MK_ROW_STEP(1)
        MK_ROW_STEP(2)
        MK_ROW_STEP(3)
    }
    (void)w1, (void)w2, (void)w3;
    _mm512_storeu_ps(out, sum16(acc));
}
#undef MK_ROW_STEP

// One row against one column (the columns past the last group of 4).
MK_AVX512 float single(const int16_t* w, const int16_t* q, int64_t nb, const float* row_scale, const float* col_scale) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b)
        acc = _mm512_fmadd_ps(block_dot(_mm512_load_si512(w + b * 32), _mm512_load_si512(q + b * 32)),
                              _mm512_set1_ps(row_scale[b] * col_scale[b]), acc);
    return _mm512_reduce_add_ps(acc);
}

// The tile's rows as words (row r at words + r * n), their scales and offsets.
template <typename W>
MK_AVX512 int16_t* decode_rows(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, int64_t n, Scratch& t) {
    const int64_t nb = n / 32;
    t.words.resize(size_t(n_rows * n) + 32);  // + 32: room to align the start to 64 bytes
    t.row_scale.resize(size_t(n_rows * nb));
    t.row_offset.resize(size_t(n_rows * nb));
    int16_t* words = t.words.data() + (64 - reinterpret_cast<uintptr_t>(t.words.data()) % 64) % 64 / 2;
    for (uint32_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* w = rows + r * row_bytes + b * W::kBytes;
            _mm512_store_si512(words + r * n + b * 32, W::words(w));
            t.row_scale[r * nb + b] = W::scale(w);
            if constexpr (W::kOffset) t.row_offset[r * nb + b] = W::offset(w);
        }
    // Groups of 4 rows; the last group repeats its last row (a pass ignores those results).
    const uint32_t n_groups = (n_rows + kRows - 1) / kRows;
    t.row_scale4.resize(size_t(n_groups * nb * kRows));
    t.row_offset4.resize(size_t(n_groups * nb * kRows));
    for (uint32_t g = 0; g < n_groups; ++g)
        for (int64_t b = 0; b < nb; ++b)
            for (uint32_t i = 0; i < kRows; ++i) {
                const size_t from = std::min(g * kRows + i, n_rows - 1) * nb + b;
                t.row_scale4[(g * nb + b) * kRows + i] = t.row_scale[from];
                if constexpr (W::kOffset) t.row_offset4[(g * nb + b) * kRows + i] = t.row_offset[from];
            }
    return words;
}

// out[r * n_cols + c] = row r . column c. Columns go 4 at a time through every row of the tile, so their values
// (4 x 64 bytes per block) are read from memory once per tile while the tile's rows stream past.
template <typename W>
MK_AVX512 void dot_tile(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols, float* out,
                        const uint8_t* next, uint64_t next_bytes) {
    const int64_t n = cols.n, nb = n / 32;
    const uint32_t n_cols = cols.n_cols;
    thread_local Scratch t;
    const int16_t* words = decode_rows<W>(rows, n_rows, row_bytes, n, t);
    t.pair_scale.resize(size_t(kRows * kCols * nb));
    auto finish = [&](uint32_t r, uint32_t c, float dot) {  // a column past the last group of 4
        if constexpr (W::kOffset) dot += dot_f32(&t.row_offset[r * nb], cols.sum + c * nb, nb);
        out[r * n_cols + c] = dot;
    };
    // The next tile's cache lines, spread over the passes (prefetched to L2 while the passes compute).
    const uint64_t n_passes = uint64_t(n_cols / kCols) * ((n_rows + kRows - 1) / kRows);
    const uint64_t lines = (next_bytes + 63) / 64, lines_per_pass = n_passes ? (lines + n_passes - 1) / n_passes : 0;
    uint64_t line = 0;
    uint32_t c = 0;
    for (; c + kCols <= n_cols; c += kCols) {
        for (uint32_t r = 0; r < n_rows; r += kRows) {
            for (uint64_t k = 0; k < lines_per_pass && line < lines; ++k, ++line)
                _mm_prefetch(reinterpret_cast<const char*>(next + line * 64), _MM_HINT_T1);
            const uint32_t n_r = std::min(kRows, n_rows - r);
            const size_t row_group = r / kRows * nb * kRows, col_group = c / kCols * nb * kCols;
            alignas(64) float offsets[kRows * kCols];  // offsets[4 i + j]: row r + i, column c + j
            _mm512_store_ps(offsets, pair_scales<W::kOffset>(&t.row_scale4[row_group], cols.d4 + col_group,
                                                              &t.row_offset4[row_group], cols.sum4 + col_group, nb,
                                                              t.pair_scale.data()));
            alignas(64) float dots[kRows * kCols];  // dots[4 j + i]: row r + i, column c + j
            const int16_t *w = words + r * n, *q = cols.q + c * n;
            switch (n_r) {
                case 4: pass<4>(w, q, n, t.pair_scale.data(), dots); break;
                case 3: pass<3>(w, q, n, t.pair_scale.data(), dots); break;
                case 2: pass<2>(w, q, n, t.pair_scale.data(), dots); break;
                default: pass<1>(w, q, n, t.pair_scale.data(), dots); break;
            }
            for (uint32_t i = 0; i < n_r; ++i)
                for (uint32_t j = 0; j < kCols; ++j)
                    out[(r + i) * n_cols + c + j] = dots[j * kRows + i] + offsets[i * kCols + j];
        }
    }
    for (; c < n_cols; ++c)
        for (uint32_t r = 0; r < n_rows; ++r)
            finish(r, c, single(words + r * n, cols.q + c * n, nb, &t.row_scale[r * nb], cols.d + c * nb));
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

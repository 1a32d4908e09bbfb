// The prefill tile kernel on AVX-512BW: a staged tile of Q8_0 / Q4_0 / Q4_1 weight rows against a chunk's q16
// activation columns (Q16Columns' split values), 4 rows x 4 columns per pass with 16 zmm accumulators. A 32-value block is one zmm
// (pmaddwd: 32 i16 products summed in pairs, exact), so each (row, column, block) costs pmaddwd + convert + FMA;
// the block's scale d_w * d_x comes from a small table (one multiply per 16 pairs, not one per pair) and Q4's
// offset term (m or -8 d, times the activation block's sum) is a separate dot over the blocks.
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

// The tile's per-block row scales and offsets, contiguous, and a pass's d_w * d_x table (n_blocks, kRows * kCols):
// one base pointer for the pass's 16 broadcasts (16 pointers did not fit the general registers). Thread-local: one
// tile per thread at a time.
struct Scratch {
    std::vector<float> row_scale, row_offset, pair_scale;
};

// table[b * 16 + 4 i + j] = row_scale[i][b] * col_scale[j][b] for rows r[0..4) and columns c[0..4) (given as pointers).
MK_AVX512 inline void pair_scales(const float* const* row_scale, const float* const* col_scale, int64_t nb, float* table) {
    const __m512i row_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t b = 0; b < nb; ++b) {
        const __m128 rs = _mm_setr_ps(row_scale[0][b], row_scale[1][b], row_scale[2][b], row_scale[3][b]);
        const __m128 cs = _mm_setr_ps(col_scale[0][b], col_scale[1][b], col_scale[2][b], col_scale[3][b]);
        const __m512 rows = _mm512_permutexvar_ps(row_lane, _mm512_broadcast_f32x4(rs));
        _mm512_storeu_ps(table + b * 16, _mm512_mul_ps(rows, _mm512_broadcast_f32x4(cs)));
    }
}

MK_AVX512 inline __m512 block_dot(__m512i w, __m512i x) { return _mm512_cvtepi32_ps(_mm512_madd_epi16(w, x)); }

// acc[i] += convert(w_i . x) * s_i for row i of the pass, i < R.
#define MK_ROW_STEP(i)                                                                                     \
    if constexpr (R > i) {                                                                                 \
        const __m512i w = W::words(row[i] + b * W::kBytes);                                               \
        a##i##0 = _mm512_fmadd_ps(block_dot(w, x0), _mm512_set1_ps(s[b * 16 + 4 * i + 0]), a##i##0);       \
        a##i##1 = _mm512_fmadd_ps(block_dot(w, x1), _mm512_set1_ps(s[b * 16 + 4 * i + 1]), a##i##1);       \
        a##i##2 = _mm512_fmadd_ps(block_dot(w, x2), _mm512_set1_ps(s[b * 16 + 4 * i + 2]), a##i##2);       \
        a##i##3 = _mm512_fmadd_ps(block_dot(w, x3), _mm512_set1_ps(s[b * 16 + 4 * i + 3]), a##i##3);       \
    }
#define MK_ROW_OUT(i)                                                                                     \
    if constexpr (R > i) {                                                                                \
        out[i * 4 + 0] = _mm512_reduce_add_ps(a##i##0), out[i * 4 + 1] = _mm512_reduce_add_ps(a##i##1);     \
        out[i * 4 + 2] = _mm512_reduce_add_ps(a##i##2), out[i * 4 + 3] = _mm512_reduce_add_ps(a##i##3);     \
    }

// Rows row[0 .. R) against the 4 columns at q (column j at q + j * n): out[i * 4 + j]. The accumulators are
// named (GCC kept an array of them on the stack in the AVX2 column kernel); each column block is loaded once
// (64-byte aligned) for the R rows.
template <typename W, uint32_t R>
MK_AVX512 void pass(const uint8_t* const* row, const int16_t* q, int64_t n, const float* s, float* out) {
    const int64_t nb = n / 32;
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
    for (int64_t b = 0; b < nb; ++b) {
        const __m512i x0 = _mm512_load_si512(q + b * 32), x1 = _mm512_load_si512(q + n + b * 32);
        const __m512i x2 = _mm512_load_si512(q + 2 * n + b * 32), x3 = _mm512_load_si512(q + 3 * n + b * 32);
        MK_ROW_STEP(0)
        MK_ROW_STEP(1)
        MK_ROW_STEP(2)
        MK_ROW_STEP(3)
    }
    MK_ROW_OUT(0)
    MK_ROW_OUT(1)
    MK_ROW_OUT(2)
    MK_ROW_OUT(3)
}
#undef MK_ROW_STEP
#undef MK_ROW_OUT

// One row against one column (the columns past the last group of 4).
template <typename W>
MK_AVX512 float single(const uint8_t* row, const int16_t* q, int64_t nb, const float* row_scale, const float* col_scale) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b)
        acc = _mm512_fmadd_ps(block_dot(W::words(row + b * W::kBytes), _mm512_load_si512(q + b * 32)),
                              _mm512_set1_ps(row_scale[b] * col_scale[b]), acc);
    return _mm512_reduce_add_ps(acc);
}

// out[r * n_cols + c] = row r . column c. Columns go 4 at a time through every row of the tile, so their values
// (4 x 64 bytes per block) are read from memory once per tile while the tile's rows stream past.
template <typename W>
MK_AVX512 void dot_tile(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols, float* out) {
    const int64_t n = cols.n, nb = n / 32;
    const uint32_t n_cols = cols.n_cols;
    thread_local Scratch t;
    t.row_scale.resize(size_t(n_rows * nb));
    t.row_offset.resize(size_t(n_rows * nb));
    t.pair_scale.resize(size_t(kRows * kCols * nb));
    for (uint32_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* w = rows + r * row_bytes + b * W::kBytes;
            t.row_scale[r * nb + b] = W::scale(w);
            if constexpr (W::kOffset) t.row_offset[r * nb + b] = W::offset(w);
        }
    auto finish = [&](uint32_t r, uint32_t c, float dot) {
        if constexpr (W::kOffset) dot += dot_f32(&t.row_offset[r * nb], cols.sum + c * nb, nb);
        out[r * n_cols + c] = dot;
    };
    uint32_t c = 0;
    for (; c + kCols <= n_cols; c += kCols) {
        for (uint32_t r = 0; r < n_rows; r += kRows) {
            const uint32_t n_r = std::min(kRows, n_rows - r);
            const uint8_t* row[kRows];
            for (uint32_t i = 0; i < kRows; ++i) row[i] = rows + (r + std::min(i, n_r - 1)) * row_bytes;
            const float* row_scale[kRows];
            const float* col_scale[kCols];
            for (uint32_t i = 0; i < kRows; ++i) row_scale[i] = &t.row_scale[(r + std::min(i, n_r - 1)) * nb];
            for (uint32_t j = 0; j < kCols; ++j) col_scale[j] = cols.d + (c + j) * nb;
            pair_scales(row_scale, col_scale, nb, t.pair_scale.data());
            float dots[kRows * kCols];
            const int16_t* q = cols.q + c * n;
            switch (n_r) {
                case 4: pass<W, 4>(row, q, n, t.pair_scale.data(), dots); break;
                case 3: pass<W, 3>(row, q, n, t.pair_scale.data(), dots); break;
                case 2: pass<W, 2>(row, q, n, t.pair_scale.data(), dots); break;
                default: pass<W, 1>(row, q, n, t.pair_scale.data(), dots); break;
            }
            for (uint32_t i = 0; i < n_r; ++i)
                for (uint32_t j = 0; j < kCols; ++j) finish(r + i, c + j, dots[i * kCols + j]);
        }
    }
    for (; c < n_cols; ++c)
        for (uint32_t r = 0; r < n_rows; ++r)
            finish(r, c, single<W>(rows + r * row_bytes, cols.q + c * n, nb, &t.row_scale[r * nb], cols.d + c * nb));
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

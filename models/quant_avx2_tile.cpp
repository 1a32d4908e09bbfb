// The prefill tile kernel on AVX2 (CPUs without AVX-512 VNNI, such as Zen 3), on quant_avx512_q16.cpp's layout: a
// staged tile of Q8_0 / Q4_0 / Q4_1 weight rows decoded to words once, against a chunk's q16 columns interleaved by
// token (Q16Columns), 4 rows x 16 columns per pass. A weight pair, broadcast, meets 8 tokens' pairs in one pmaddwd
// (and, without VNNI, an add), so a block's products sum in integers for 16 tokens and are converted and scaled once a
// block: ~2.8 instructions per pmaddwd of 16 products. The column kernel these CPUs ran before (quant_avx2_q16.cpp's
// dot_cols: a row x 4 columns, each weight block widened again for every 4 columns and each column's block converted
// and scaled on its own) did 1.5-1.8x fewer products a second on one Zen 3 core.
#include <algorithm>
#include <cstring>
#include <vector>

#include "models/quant_avx2.hpp"
#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"
#include "models/quant_tile.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Per format: the block's 32 integer values as words in value order (lo: values 0-15, hi: 16-31), its scale d and the
// offset o such that value = q * d + o (Q8_0: 0; Q4_0: -8 d; Q4_1: m).
struct TileQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr bool kOffset = false;
    MK_AVX2 static void words(const uint8_t* w, __m256i& lo, __m256i& hi) {
        lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
        hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
    }
    static float offset(const uint8_t*) { return 0; }
};
struct TileQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr bool kOffset = true;
    MK_AVX2 static void words(const uint8_t* w, __m256i& lo, __m256i& hi) { nibble_words(w + 2, lo, hi); }
    MK_AVX2 static float offset(const uint8_t* w) { return -8 * f16_at(w); }
};
struct TileQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr bool kOffset = true;
    MK_AVX2 static void words(const uint8_t* w, __m256i& lo, __m256i& hi) { nibble_words(w + 4, lo, hi); }
    MK_AVX2 static float offset(const uint8_t* w) { return f16_at(w + 2); }
};

constexpr uint32_t kRows = 4;        // a pass's rows
constexpr uint32_t kBlockCols = 64;  // columns whose values a run keeps in L2: 64 x 1024 x 2 bytes
constexpr int64_t kRunBlocks = 32;   // blocks a run keeps of the pass's rows in L1: 4 x 1024 x 2 bytes

// The tile's rows decoded once (32-byte aligned words for the aligned 256-bit loads).
template <typename W>
MK_AVX2 const int16_t* decode_rows(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, int64_t n,
                                   tile::DecodedRows& t) {
    const int64_t nb = n / 32;
    int16_t* words = t.resize(n_rows, n, 32);
    for (uint32_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* w = rows + r * row_bytes + b * W::kBytes;
            __m256i lo, hi;
            W::words(w, lo, hi);
            _mm256_store_si256(reinterpret_cast<__m256i*>(words + r * n + b * 32), lo);
            _mm256_store_si256(reinterpret_cast<__m256i*>(words + r * n + b * 32 + 16), hi);
            t.row_scale[r * nb + b] = f16_at(w);
            if constexpr (W::kOffset) t.row_offset[r * nb + b] = W::offset(w);
        }
    return words;
}

MK_AVX2 inline __m256i pair_at(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Rows w[0..4) (a row past the tile repeats the last; its results are dropped) against the 16 columns of a Q16Columns
// group (q, d and s at its first column), blocks [b_begin, b_end): acc[2 i + h] lane t += row i . column 8 h + t over
// them. Per block, each row's 16 value pairs are broadcast and pmaddwd'd against both halves into 8 integer sums
// (exact: a pair sums below 2^31), then converted and scaled once: d_w (broadcast) x the columns' d, plus Q4's offset
// times the columns' block sums.
template <bool kOffset>
MK_AVX2 void rows_x16(const int16_t* const* w, const float* const* row_scale, const float* const* row_offset,
                      const int16_t* q, const float* d, const float* s, int64_t b_begin, int64_t b_end, __m256* acc) {
    for (int64_t b = b_begin; b < b_end; ++b) {
        __m256i sum[8];
        for (int i = 0; i < 8; ++i) sum[i] = _mm256_setzero_si256();
        const int16_t* x = q + b * 512;
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) {
            const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32 * p));
            const __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32 * p + 16));
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                const __m256i wp = pair_at(w[i] + b * 32 + 2 * p);
                sum[2 * i] = _mm256_add_epi32(sum[2 * i], _mm256_madd_epi16(a0, wp));
                sum[2 * i + 1] = _mm256_add_epi32(sum[2 * i + 1], _mm256_madd_epi16(a1, wp));
                // The sums stay in registers pair by pair: GCC otherwise reassociates a block's integer adds into a
                // tree and parks all its products on the stack first (22 -> 48 GMAC/s on one Zen 3 core, K = 2048).
                asm("" : "+x"(sum[2 * i]), "+x"(sum[2 * i + 1]));
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m256 dx = _mm256_loadu_ps(d + b * 16 + 8 * h);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                __m256& a = acc[2 * i + h];
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[2 * i + h]),
                                    _mm256_mul_ps(_mm256_set1_ps(row_scale[i][b]), dx), a);
                if constexpr (kOffset)
                    a = _mm256_fmadd_ps(_mm256_set1_ps(row_offset[i][b]), _mm256_loadu_ps(s + b * 16 + 8 * h), a);
            }
        }
    }
}

// out[r * n_cols + c] = row r . column c: 4 rows x 16 columns at a time, the columns' values read once per 4 rows.
template <typename W>
MK_AVX2 void dot_tile(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols, float* out,
                      const uint8_t* next, uint64_t next_bytes) {
    const int64_t n = cols.n, nb = n / 32;
    const uint32_t n_cols = cols.n_cols;
    thread_local tile::DecodedRows t;
    thread_local std::vector<float> sum_storage;  // (n_rows, column octets, 8): the dots, summed run by run
    const int16_t* words = decode_rows<W>(rows, n_rows, row_bytes, n, t);
    const uint32_t octs = (n_cols + 15) / 16 * 2;
    tile::NextTilePrefetch prefetch(next, next_bytes,
                                    uint64_t((n_cols + kBlockCols - 1) / kBlockCols) *
                                        ((nb + kRunBlocks - 1) / kRunBlocks) * ((n_rows + kRows - 1) / kRows));
    sum_storage.assign(size_t(n_rows) * octs * 8 + 8, 0.0f);
    float* sums = sum_storage.data() + (32 - reinterpret_cast<uintptr_t>(sum_storage.data()) % 32) % 32 / 4;
    // Columns in blocks of kBlockCols and rows in runs of kRunBlocks blocks, so a pass's run of words stays in L1 for
    // the block's columns and their run of values in L2: whole rows left the 4 rows (64 KiB at K = 8192) and 32 columns
    // (512 KiB) to stream from L2 and L3 (K = 8192, 30 rows x 64 columns: 29 -> 36 GMAC/s on one core).
    for (uint32_t c0 = 0; c0 < n_cols; c0 += kBlockCols)
        for (int64_t b = 0; b < nb; b += kRunBlocks)
            for (uint32_t r = 0; r < n_rows; r += kRows) {
                prefetch.pass();
                const tile::PassRows<kRows> pass(words, t, r, n_rows, n);
                const uint32_t n_r = pass.count;
                for (uint32_t c = c0; c < std::min(n_cols, c0 + kBlockCols); c += 16) {
                    // Columns c..c+15: group c / 16, whose pair p of block b is at q + (group nb + b) 512 + 32 p.
                    const int16_t* q = cols.q + c / 16 * nb * 512;
                    const float *d = cols.d + c / 16 * nb * 16, *s = cols.sum + c / 16 * nb * 16;
                    __m256 acc[2 * kRows];
                    for (uint32_t i = 0; i < kRows; ++i)
                        for (uint32_t h = 0; h < 2; ++h)
                            acc[2 * i + h] = _mm256_load_ps(sums + (size_t(pass.row(i)) * octs + c / 8 + h) * 8);
                    rows_x16<W::kOffset>(pass.words, pass.scale, pass.offset, q, d, s, b, std::min(nb, b + kRunBlocks),
                                         acc);
                    for (uint32_t i = 0; i < n_r; ++i)
                        for (uint32_t h = 0; h < 2; ++h)
                            _mm256_store_ps(sums + (size_t(r + i) * octs + c / 8 + h) * 8, acc[2 * i + h]);
                }
            }
    for (uint32_t r = 0; r < n_rows; ++r)
        for (uint32_t c = 0; c < n_cols; ++c) out[r * n_cols + c] = sums[(size_t(r) * octs + c / 8) * 8 + c % 8];
}

}  // namespace

void add_avx2_tile(CpuKernels& k) {
    k.dot_q16_tile[slot(DType::Q8_0)] = dot_tile<TileQ8_0>;
    k.dot_q16_tile[slot(DType::Q4_0)] = dot_tile<TileQ4_0>;
    k.dot_q16_tile[slot(DType::Q4_1)] = dot_tile<TileQ4_1>;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_tile(CpuKernels&) {}
}  // namespace mk::quant

#endif

// Internal to the prefill tile kernels (quant_avx512_q16.cpp, quant_avx2_tile.cpp): what they share that is not ISA
// code. A staged tile's rows are decoded once to words, each kernel's passes take kRows of them at a time, and the
// next tile's cache lines are prefetched a few per pass.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>  // _mm_prefetch: SSE, in every x86-64

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mk::quant::tile {

// The tile's rows decoded once: words (row r at words(...) + r * n) and per-block scales and offsets (Q4's -8 d or
// m). Thread-local in each kernel: one tile per thread at a time.
struct DecodedRows {
    std::vector<int16_t> storage;
    std::vector<float> row_scale, row_offset;  // (n_rows, n / 32)
    // Room for n_rows rows of n words starting at an `align`-byte boundary, which it returns.
    int16_t* resize(uint32_t n_rows, int64_t n, uint32_t align) {
        storage.resize(size_t(n_rows * n) + align / 2);
        row_scale.resize(size_t(n_rows * (n / 32)));
        row_offset.resize(size_t(n_rows * (n / 32)));
        return storage.data() + (align - reinterpret_cast<uintptr_t>(storage.data()) % align) % align / 2;
    }
};

// A pass's kRows rows from row r: their words, scales and offsets; a row past the tile repeats the last (its
// results are dropped), so the pass's code has no short case.
template <uint32_t kRows>
struct PassRows {
    const int16_t* words[kRows];
    const float* scale[kRows];
    const float* offset[kRows];
    uint32_t first, count;  // the pass's first row, and its rows that are the tile's
    PassRows(const int16_t* decoded, const DecodedRows& t, uint32_t r, uint32_t n_rows, int64_t n)
        : first(r), count(std::min(kRows, n_rows - r)) {
        const int64_t nb = n / 32;
        for (uint32_t i = 0; i < kRows; ++i) {
            const uint32_t at = row(i);
            words[i] = decoded + at * n, scale[i] = &t.row_scale[at * nb], offset[i] = &t.row_offset[at * nb];
        }
    }
    // The tile row the pass's row i reads.
    uint32_t row(uint32_t i) const { return first + std::min(i, count - 1); }
};

// The next tile's cache lines (`next`, `bytes`; null: none), spread over a kernel's n_passes passes: pass() before
// each prefetches its share into L2 while the passes compute, so the next tile's decode does not wait on memory.
class NextTilePrefetch {
public:
    NextTilePrefetch(const uint8_t* next, uint64_t bytes, uint64_t n_passes)
        : next_(next), lines_((bytes + 63) / 64), per_pass_(n_passes ? (lines_ + n_passes - 1) / n_passes : 0) {}
    void pass() {
        for (uint64_t k = 0; k < per_pass_ && line_ < lines_; ++k, ++line_)
            _mm_prefetch(reinterpret_cast<const char*>(next_ + line_ * 64), _MM_HINT_T1);
    }

private:
    const uint8_t* next_;
    uint64_t lines_, per_pass_, line_ = 0;
};

}  // namespace mk::quant::tile

#endif

// Small fp32 helpers the CPU ops share: RMSNorm, SiLU, adjacent-pair RoPE, a row-block matvec over tiles.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "instructions/op_context.hpp"
#include "models/quant.hpp"

namespace mk {

// out = w * x / sqrt(mean(x^2) + eps); w is an F32 vector weight. Sum of squares in double for stability,
// in four interleaved partial sums: one chain of dependent adds made this the costliest part of the small
// rms_* instructions a 132-SM schedule has thousands of (each recomputes its norm).
inline void rms_norm(const float* x, const WeightRef& w, float eps, uint32_t n, float* out) {
    double part[4] = {0.0, 0.0, 0.0, 0.0};
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (uint32_t k = 0; k < 4; ++k) part[k] += double(x[i + k]) * x[i + k];
    for (; i < n; ++i) part[0] += double(x[i]) * x[i];
    const double sum_sq = (part[0] + part[1]) + (part[2] + part[3]);
    const float scale = float(1.0 / std::sqrt(sum_sq / n + eps));
    const float* weight = reinterpret_cast<const float*>(w.data);
    for (uint32_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// The cosine and sine RoPE rotates a pair by at `pos` (angle pos * inv_freq, in double).
inline void rope_cos_sin(int32_t pos, float inv_freq, float& c, float& s) {
    const double angle = double(pos) * inv_freq;
    c = float(std::cos(angle)), s = float(std::sin(angle));
}
// Rotates one adjacent pair (a, b) = (v[2i], v[2i+1]) by the angle of (c, s).
inline void rope_rotate(float& a, float& b, float c, float s) {
    const float x = a, y = b;
    a = x * c - y * s;
    b = x * s + y * c;
}
// Rotates one adjacent pair by pos * inv_freq (mk's one RoPE convention).
inline void rope_pair(float& a, float& b, int32_t pos, float inv_freq) {
    float c, s;
    rope_cos_sin(pos, inv_freq, c, s);
    rope_rotate(a, b, c, s);
}

// An op's input vector for its row dots, in the context's dot mode: q16 quantizes it on the first dot with a
// format that has a q16 kernel (one thread-local buffer: one RowDots per thread at a time).
class RowDots {
public:
    RowDots(const OpContext& ctx, const float* x, uint32_t n)
        : x_(x), n_(n), q16_(ctx.dots == CpuDots::q16 && n % kActivationBlockValues == 0) {}
    float dot(DType dtype, const uint8_t* row) {
        if (!q16_ || !has_q16_dot(dtype)) return dot_row(dtype, row, x_, n_);
        if (!quantized_) {
            blocks().resize(n_ / kActivationBlockValues);
            quantize_activations_q16(x_, n_, blocks().data());
            quantized_ = true;
        }
        return dot_row_q16(dtype, row, blocks().data(), n_);
    }

private:
    static std::vector<BlockQ16>& blocks() {
        thread_local std::vector<BlockQ16> buffer;
        return buffer;
    }
    const float* x_;
    uint32_t n_;
    bool q16_, quantized_ = false;
};

// The input columns of a prefill op: n_cols vectors of n fp32 values, (n_cols, n) row-major. dots() takes one
// weight row against every column while the row is in L1 (the row is read once per chunk, not once per token);
// q16 quantizes all columns on the first dot that needs it, as RowDots does for one, and decodes each weight
// block once for 4 columns (dot_row_q16_cols).
class ColumnDots {
public:
    ColumnDots(const OpContext& ctx, const float* x, uint32_t n, uint32_t n_cols)
        : x_(x), n_(n), n_cols_(n_cols), q16_(ctx.dots == CpuDots::q16 && n % kActivationBlockValues == 0) {}
    // out[j * stride] = row . column j.
    void dots(DType dtype, const uint8_t* row, float* out, uint32_t stride) {
        if (!q16_ || !has_q16_dot(dtype)) {
            for (uint32_t j = 0; j < n_cols_; ++j) out[size_t(j) * stride] = dot_row(dtype, row, x_ + size_t(j) * n_, n_);
            return;
        }
        const uint32_t per = n_ / kActivationBlockValues;
        quantize();
        dot_row_q16_cols(dtype, row, blocks().data(), n_, per, n_cols_, out, stride);
    }

    // Rows [0, n_rows) of a staged tile against every column: out[r * n_cols + j]. Columns go 4 at a time through
    // all the tile's rows, so a group's activations are read once per tile, not once per row (per row, a 64-token
    // chunk's q16 activations are ~135x a Q8_0 row's bytes: re-read per row they dominated Llama-3.2-1B's prefill).
    // `next`, next_bytes: the tile after this one (or null), prefetched meanwhile (next_tile_bytes).
    void tile(DType dtype, const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, float* out,
              const uint8_t* next = nullptr, uint64_t next_bytes = 0) {
        if (!q16_ || !has_q16_dot(dtype)) {
            for (uint32_t r = 0; r < n_rows; ++r) dots(dtype, rows + r * row_bytes, out + size_t(r) * n_cols_, 1);
            return;
        }
        quantize();
        dot_rows_q16_cols(dtype, rows, n_rows, row_bytes, columns(), out, next, next_bytes);
    }

    // An MMA tile's slice: rows [0, n_rows) (`pitch` bytes apart) hold columns [col_begin, col_begin + slice) of
    // their weight rows; sums[r * n_cols + j] += the slice's dot with column j. Exact dots only: MMA tiles are the
    // device targets' (BF16, F16, Q8_0, Q4_0, Q4_1), whose code takes fp32 inputs (rows_math.cuh).
    void slice(DType dtype, const uint8_t* rows, uint32_t n_rows, uint64_t pitch, uint32_t col_begin, uint32_t slice,
               float* sums) {
        for (uint32_t r = 0; r < n_rows; ++r)
            for (uint32_t j = 0; j < n_cols_; ++j)
                sums[size_t(r) * n_cols_ + j] += dot_row(dtype, rows + r * pitch, x_ + size_t(j) * n_ + col_begin, slice);
    }

private:
    void quantize() {
        if (quantized_) return;
        const uint32_t per = n_ / kActivationBlockValues;
        blocks().resize(size_t(per) * n_cols_);
        for (uint32_t j = 0; j < n_cols_; ++j) quantize_activations_q16(x_ + size_t(j) * n_, n_, blocks().data() + size_t(j) * per);
        columns().split(blocks().data(), n_, n_cols_);
        quantized_ = true;
    }
    static Q16Columns& columns() {
        thread_local Q16Columns split;
        return split;
    }
    static std::vector<BlockQ16>& blocks() {
        thread_local std::vector<BlockQ16> buffer;
        return buffer;
    }
    const float* x_;
    uint32_t n_, n_cols_;
    bool q16_, quantized_ = false;
};

// Where the instruction's tile t + 1 lies in the weights, and its size: a prefetch hint for the prefill tile
// kernel (an address only: the tile is staged, and checked, when its turn comes). Null past the last tile.
inline const uint8_t* next_tile_bytes(const OpContext& ctx, uint32_t t, uint64_t& n_bytes) {
    n_bytes = 0;
    if (t + 1 >= ctx.plan->tiles.size()) return nullptr;
    const Tile& next = ctx.plan->tiles[t + 1];
    const WeightRef& w = ctx.weights[next.weight];
    n_bytes = uint64_t(next.n_rows) * w.row_bytes;
    return w.row(next.row_begin);
}

// Visits every row of the instruction's tiles that belong to `weight`, in tile order:
// visit(row_index, row_bytes_pointer).
template <typename Visit>
inline void for_each_tile_row(OpContext& ctx, uint32_t weight, Visit&& visit) {
    const WeightRef& w = ctx.weights[weight];
    for (uint32_t t = 0; t < ctx.plan->tiles.size(); ++t) {
        const Tile& tile = ctx.plan->tiles[t];
        if (tile.weight != weight) continue;
        const uint8_t* bytes = ctx.tiles->tile(t);
        for (uint32_t r = 0; r < tile.n_rows; ++r) visit(tile.row_begin + r, bytes + uint64_t(r) * w.row_bytes);
    }
}

// Every row of the instruction's tiles against every column (token) of `dots`, tile by tile (ColumnDots::tile):
// visit(tile, dots) with dots[r * n_tokens + j] for the tile's rows r, once they are whole. An MMA tile plan's
// (page_plan.hpp) column slices add up in `sums` until a group's last slice: visited then, gate before up.
template <typename Visit>
inline void for_each_tile_dots(OpContext& ctx, ColumnDots& dots, uint32_t n_tokens, Visit&& visit) {
    thread_local std::vector<float> out, sums;
    const std::vector<Tile>& tiles = ctx.plan->tiles;
    uint32_t first = UINT32_MAX, end = 0;  // the rows the tiles span (MMA tiles: sums for each of up to 2 weights)
    for (const Tile& t : tiles) first = std::min(first, t.row_begin), end = std::max(end, t.row_begin + t.n_rows);
    if (!tiles.empty() && !tiles[0].whole_rows()) sums.resize(2 * size_t(end - first) * n_tokens);
    for (uint32_t t = 0; t < tiles.size(); ++t) {
        const Tile& tile = tiles[t];
        const WeightRef& w = ctx.weights[tile.weight];
        if (tile.whole_rows()) {
            out.resize(size_t(tile.n_rows) * n_tokens);
            uint64_t next_bytes = 0;
            const uint8_t* next = next_tile_bytes(ctx, t, next_bytes);
            dots.tile(w.dtype, ctx.tiles->tile(t), tile.n_rows, ctx.tiles->pitch(t), out.data(), next, next_bytes);
            visit(tile, out.data());
            continue;
        }
        const size_t slot = tile.weight == tiles[0].weight ? 0 : 1;
        float* sum = sums.data() + (slot * (end - first) + (tile.row_begin - first)) * n_tokens;
        if (tile.col_begin == 0) std::fill(sum, sum + size_t(tile.n_rows) * n_tokens, 0.0f);
        dots.slice(w.dtype, ctx.tiles->tile(t), tile.n_rows, ctx.tiles->pitch(t), tile.col_begin, tile.n_cols, sum);
        if (tile.col_begin + tile.n_cols == w.cols) visit(tile, static_cast<const float*>(sum));
    }
}

// The same for the rows of `weight`: visit(row_index, dots_of_the_row) with one value per column.
template <typename Visit>
inline void for_each_tile_row_dots(OpContext& ctx, uint32_t weight, ColumnDots& dots, uint32_t n_cols, Visit&& visit) {
    for_each_tile_dots(ctx, dots, n_cols, [&](const Tile& tile, const float* out) {
        if (tile.weight != weight) return;
        for (uint32_t r = 0; r < tile.n_rows; ++r) visit(tile.row_begin + r, out + size_t(r) * n_cols);
    });
}

}  // namespace mk

// Device helpers the prefill (rows) ops share: a chunk's activations are (T, width) fp32 rows, one per token
// (token_rows.hpp); each weight tile is acquired once and every one of its rows is dotted with all the step's
// tokens before it is released, so a chunk reads its weights once. Scalar fp32 dots (row_dot) for every format.
#pragma once
#include "instructions/common/device_math.cuh"

namespace mk::dev {

// The tokens a prefill step runs: the chunk's, at most the compiled n_tok (as token_rows.hpp's step_tokens).
__device__ inline uint32_t step_tokens(const DeviceOpContext& ctx, uint32_t n_tok) {
    return ctx.n_tokens < 0 ? 0u : min(uint32_t(ctx.n_tokens), n_tok);
}

// One token's row of a (T, width) fp32 buffer. Rows past the first are 16-byte aligned only when width is a
// multiple of 4, so values are read one by one.
struct TokenVector {
    const float* x;
    __device__ float4 load4(uint32_t i) const { return {x[i], x[i + 1], x[i + 2], x[i + 3]}; }
    __device__ float at(uint32_t i) const { return x[i]; }
};

// One token's residual row RMS-normed as it is read: w[i] * (x[i] * scale), rounded as rms_norm rounds it.
struct NormedVector {
    const float* x;
    const float* w;
    float scale;
    __device__ float at(uint32_t i) const { return w[i] * (x[i] * scale); }
    __device__ float4 load4(uint32_t i) const { return {at(i), at(i + 1), at(i + 2), at(i + 3)}; }
};

// scales[j] = 1 / sqrt(mean(x_j^2) + eps) for the n rows of a (n, width) fp32 buffer, one warp per row (the root
// in double, as rms_norm); ends with a sync so every thread sees them.
__device__ inline void rms_scales(const float* x, uint32_t width, uint32_t n, float eps, float* scales, const Team& team) {
    for (uint32_t j = team.warp(); j < n; j += team.n_warps()) {
        const float* row = x + uint64_t(j) * width;
        float sum_sq = 0.0f;
        for (uint32_t i = team.lane(); i < width; i += 32) sum_sq += row[i] * row[i];
        sum_sq = warp_sum(sum_sq);
        if (team.lane() == 0) scales[j] = float(1.0 / sqrt(double(sum_sq) / width + eps));
    }
    team.sync();
}

// Calls visit(tile, row, j, dot) for every weight row of every tile and every token j < n, dot = row . column(j)
// (a vector view) valid in all lanes of the visiting warp. Rows are dealt as for_each_warp_row deals them (a row of
// paired gate/up tiles falls to the same warp); a warp finishes all tokens of a row before the next, and every
// warp acquires and releases every tile even when n is 0 (the page ring's contract).
template <class Tiles, class Column, class Visit>
__device__ inline void for_each_row_token_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles, uint32_t n,
                                              uint32_t cols, Column&& column, Visit&& visit) {
    for_each_warp_row(ctx, team, tiles,
                      [&](const DeviceTile& tile, uint32_t row, const uint8_t* bytes, const DeviceWeight& w) {
                          for (uint32_t j = 0; j < n; ++j)
                              visit(tile, row, j, row_dot(w.dtype, bytes, column(j), cols, team.lane()));
                      });
}

// The same with column j = token j's residual row (x: (n, width) fp32) RMS-normed with the F32 weight `norm`: the
// tokens' scales first, in the vector scratch (n floats).
template <class Tiles, class Visit>
__device__ inline void for_each_row_normed_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles,
                                               const float* x, uint32_t norm, uint32_t width, uint32_t n, Visit&& visit) {
    const float* w = reinterpret_cast<const float*>(ctx.weights[norm].data);
    float* scales = vector_scratch(ctx);  // (n) fp32
    rms_scales(x, width, n, ctx.dims.norm_eps, scales, team);
    for_each_row_token_dot(
        ctx, team, tiles, n, width, [&](uint32_t j) { return NormedVector{x + uint64_t(j) * width, w, scales[j]}; },
        visit);
}

}  // namespace mk::dev

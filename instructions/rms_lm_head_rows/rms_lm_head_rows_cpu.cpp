// rms_lm_head_rows on the CPU.
#include "instructions/rms_lm_head_rows/rms_lm_head_rows.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void RmsLmHeadRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsLmHeadRowsArgs>(ins);
    const uint32_t n = step_tokens(*ctx.step, a.n_tok);
    // The tokens whose logits are asked for: the block's that run, or the last.
    const TokenBlock run = a.all ? run_token_block(a.tokens(), n) : TokenBlock{n ? n - 1 : 0, n};
    const uint32_t first = run.begin, cols = run.count();
    if (cols == 0) return;
    thread_local std::vector<float> xn;
    xn.resize(size_t(cols) * a.d_model);
    for (uint32_t j = 0; j < cols; ++j)
        rms_norm(ctx.f32(a.x_off) + size_t(first + j) * a.d_model, ctx.weights[a.norm], ctx.dims->norm_eps, a.d_model,
                 xn.data() + size_t(j) * a.d_model);
    float* logits = ctx.f32(a.logits_off) + (a.all ? size_t(first) * a.vocab : 0);
    ColumnDots dots(ctx, xn.data(), a.d_model, cols);
    // A tile's dots are (rows, cols); each token's logits row takes the tile's rows as one contiguous run (written
    // row by row, a token's value at a time, every row touched cols cache lines: 9% of a 128-token perplexity chunk).
    for_each_tile_dots(ctx, dots, cols, [&](const Tile& tile, const float* out) {
        if (tile.weight != a.weight) return;
        for (uint32_t j = 0; j < cols; ++j) {
            float* dst = logits + size_t(j) * a.vocab + tile.row_begin;
            for (uint32_t r = 0; r < tile.n_rows; ++r) dst[r] = out[size_t(r) * cols + j];
        }
    });
}

std::string RmsLmHeadRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsLmHeadRowsArgs>(ins);
    if (!a.all) return fmt::format("rms_lm_head_rows rows [{}, {}) T={} last", a.row_begin, a.row_begin + a.n_rows, a.n_tok);
    const TokenBlock tokens = a.tokens();
    return fmt::format("rms_lm_head_rows rows [{}, {}) tokens [{}, {}) T={} all", a.row_begin, a.row_begin + a.n_rows,
                       tokens.begin, tokens.end, a.n_tok);
}

}  // namespace mk

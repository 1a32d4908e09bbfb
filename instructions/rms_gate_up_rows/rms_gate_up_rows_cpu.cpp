// rms_gate_up_rows on the CPU: tiles arrive as (gate chunk, up chunk) pairs of the same rows.
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void RmsGateUpRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsGateUpRowsArgs>(ins);
    const TokenBlock run = run_token_block(a.tokens(), step_tokens(*ctx.step, a.n_tok));
    const uint32_t n = run.count();
    thread_local std::vector<float> xn, gate;  // (n, d_model); (n_rows, n) gate dots
    xn.resize(size_t(n) * a.d_model);
    gate.resize(size_t(a.n_rows) * n);
    for (uint32_t j = 0; j < n; ++j)
        rms_norm(ctx.f32(a.x_off) + size_t(run.begin + j) * a.d_model, ctx.weights[a.norm], ctx.dims->norm_eps, a.d_model,
                 xn.data() + size_t(j) * a.d_model);
    float* act = ctx.f32(a.act_off) + size_t(run.begin) * a.d_ff;
    ColumnDots dots(ctx, xn.data(), a.d_model, n);
    // Tile by tile (for_each_tile_dots): a gate tile's dots wait in `gate` for the up tile of the same rows.
    for_each_tile_dots(ctx, dots, n, [&](const Tile& tile, const float* out) {
        float* g = gate.data() + size_t(tile.row_begin - a.row_begin) * n;
        if (tile.weight == a.gate) {
            std::copy(out, out + size_t(tile.n_rows) * n, g);
            return;
        }
        for (uint32_t j = 0; j < n; ++j) {  // token by token: each token's act row is written in order
            float* act_row = act + size_t(j) * a.d_ff + tile.row_begin;
            for (uint32_t r = 0; r < tile.n_rows; ++r) act_row[r] = silu(g[size_t(r) * n + j]) * out[size_t(r) * n + j];
        }
    });
}

std::string RmsGateUpRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsGateUpRowsArgs>(ins);
    const TokenBlock tokens = a.tokens();
    return fmt::format("rms_gate_up_rows L{} rows [{}, {}) tokens [{}, {}) T={}", a.layer, a.row_begin,
                       a.row_begin + a.n_rows, tokens.begin, tokens.end, a.n_tok);
}

}  // namespace mk

// rms_gate_up_rows on the CPU: tiles arrive as (gate chunk, up chunk) pairs of the same rows.
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void RmsGateUpRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsGateUpRowsArgs>(ins);
    const uint32_t n = step_tokens(*ctx.step, a.n_tok);
    thread_local std::vector<float> xn, gate, up;  // (n, d_model); (n_rows, n) gate dots; (n) up dots of one row
    xn.resize(size_t(n) * a.d_model);
    gate.resize(size_t(a.n_rows) * n);
    up.resize(n);
    for (uint32_t j = 0; j < n; ++j)
        rms_norm(ctx.f32(a.x_off) + size_t(j) * a.d_model, ctx.weights[a.norm], ctx.dims->norm_eps, a.d_model,
                 xn.data() + size_t(j) * a.d_model);
    const WeightRef& wg = ctx.weights[a.gate];
    const WeightRef& wu = ctx.weights[a.up];
    float* act = ctx.f32(a.act_off);
    ColumnDots dots(ctx, xn.data(), a.d_model, n);
    for (uint32_t t = 0; t < ctx.plan->tiles.size(); ++t) {
        const Tile& tile = ctx.plan->tiles[t];
        const uint8_t* bytes = ctx.tiles->tile(t);
        const bool is_gate = tile.weight == a.gate;
        const WeightRef& w = is_gate ? wg : wu;
        for (uint32_t r = 0; r < tile.n_rows; ++r) {
            const uint32_t row = tile.row_begin + r;
            float* g = gate.data() + size_t(row - a.row_begin) * n;
            if (is_gate) {
                dots.dots(w.dtype, bytes + uint64_t(r) * w.row_bytes, g, 1);
                continue;
            }
            dots.dots(w.dtype, bytes + uint64_t(r) * w.row_bytes, up.data(), 1);
            for (uint32_t j = 0; j < n; ++j) act[size_t(j) * a.d_ff + row] = silu(g[j]) * up[j];
        }
    }
}

std::string RmsGateUpRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsGateUpRowsArgs>(ins);
    return fmt::format("rms_gate_up_rows L{} rows [{}, {}) T={}", a.layer, a.row_begin, a.row_begin + a.n_rows, a.n_tok);
}

}  // namespace mk

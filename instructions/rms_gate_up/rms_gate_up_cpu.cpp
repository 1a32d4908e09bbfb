// rms_gate_up on the CPU: tiles arrive as (gate chunk, up chunk) pairs of the same rows.
#include "instructions/rms_gate_up/rms_gate_up.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void RmsGateUpOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsGateUpArgs>(ins);
    thread_local std::vector<float> xn, gate;
    xn.resize(a.d_model);
    gate.resize(a.n_rows);
    rms_norm(ctx.f32(a.x_off), ctx.weights[a.norm], ctx.dims->norm_eps, a.d_model, xn.data());
    const WeightRef& wg = ctx.weights[a.gate];
    const WeightRef& wu = ctx.weights[a.up];
    float* act = ctx.f32(a.act_off);
    RowDots dots(ctx, xn.data(), a.d_model);
    for (uint32_t t = 0; t < ctx.plan->tiles.size(); ++t) {
        const Tile& tile = ctx.plan->tiles[t];
        const uint8_t* bytes = ctx.tiles->tile(t);
        const bool is_gate = tile.weight == a.gate;
        const WeightRef& w = is_gate ? wg : wu;
        for (uint32_t r = 0; r < tile.n_rows; ++r) {
            const uint32_t row = tile.row_begin + r;
            const float v = dots.dot(w.dtype, bytes + uint64_t(r) * w.row_bytes);
            if (is_gate) gate[row - a.row_begin] = v;
            else act[row] = silu(gate[row - a.row_begin]) * v;
        }
    }
}

std::string RmsGateUpOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsGateUpArgs>(ins);
    return fmt::format("rms_gate_up L{} rows [{}, {})", a.layer, a.row_begin, a.row_begin + a.n_rows);
}

}  // namespace mk

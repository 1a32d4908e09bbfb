// rms_gate_up_rows on the device: the token block's RMS scales into scratch, then (gate chunk, up chunk) tile pairs of
// the same rows, each row dotted with every token's normed residual. A row falls to the same warp in both tiles,
// so the lane holding a dot parks the gate dot in act[j][row] (the op's own output) and combines it when the up
// dot arrives in the same lane (rows_math.cuh).
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.hpp"

namespace mk {

struct RmsGateUpRowsDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsGateUpRowsArgs>(ins);
        const TokenBlock run = run_token_block(a.tokens(), dev::step_tokens(ctx, a.n_tok));
        float* act = ctx.f32(a.act_off) + uint64_t(run.begin) * a.d_ff;  // the block's (n, d_ff) fp32
        dev::for_each_row_normed_dot(ctx, team, tiles, ctx.f32(a.x_off) + uint64_t(run.begin) * a.d_model, a.norm,
                                     a.d_model, run.count(),
                                     [&](const DeviceTile& tile, uint32_t row, uint32_t j, float dot) {
                                         float& out = act[uint64_t(j) * a.d_ff + row];
                                         out = tile.weight == a.gate ? dot : dev::silu(out) * dot;
                                     });
    }
};

}  // namespace mk

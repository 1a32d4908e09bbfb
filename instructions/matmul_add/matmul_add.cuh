// matmul_add on the device: x[j][row] += W[row] . in[j] (or = with store) for the step's tokens; each tile's row is dotted with
// every token's input by the warp that owns it (rows_math.cuh), so the chunk reads each weight row once.
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/matmul_add/matmul_add.hpp"

namespace mk {

struct MatmulAddDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<MatmulAddArgs>(ins);
        const float* in = ctx.f32(a.in_off);  // (n_tok, cols) fp32
        float* x = ctx.f32(a.x_off);          // (n_tok, x_width) fp32
        dev::for_each_row_token_dot(
            ctx, team, tiles, dev::step_tokens(ctx, a.n_tok), a.cols,
            [&](uint32_t j) { return dev::TokenVector{in + uint64_t(j) * a.cols}; },
            [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                if (team.lane() != 0) return;
                float& out = x[uint64_t(j) * a.x_width + row];
                out = a.store ? dot : out + dot;
            });
    }
};

}  // namespace mk

// matmul_add on the device: x[j][row] += W[row] . in[j] (or = with store) for the block's tokens; each tile's row
// is dotted with every token's input by the warp that owns it (rows_math.cuh): each weight row read once a block.
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/matmul_add/matmul_add.hpp"

namespace mk {

struct MatmulAddDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<MatmulAddArgs>(ins);
        const TokenBlock run = run_token_block(a.tokens(), dev::step_tokens(ctx, a.n_tok));
        const float* in = ctx.f32(a.in_off) + uint64_t(run.begin) * a.cols;  // the block's (n, cols) fp32
        float* x = ctx.f32(a.x_off) + uint64_t(run.begin) * a.x_width;       // the block's (n, x_width) fp32
        dev::for_each_row_token_dot(
            ctx, team, tiles, run.count(), a.cols,
            [&](uint32_t j) { return dev::TokenVector{in + uint64_t(j) * a.cols}; },
            [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                float& out = x[uint64_t(j) * a.x_width + row];
                out = a.store ? dot : out + dot;
            });
    }
};

}  // namespace mk

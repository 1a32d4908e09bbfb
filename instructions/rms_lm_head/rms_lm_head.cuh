// rms_lm_head on the device: RMSNorm into scratch, a logit per row (one warp per row), and the
// block's argmax: each warp keeps its best row (it sees its rows in increasing order, so strict >
// keeps the lowest index), then rank 0 merges the warps, the lowest index winning ties.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/rms_lm_head/rms_lm_head.hpp"

namespace mk {

struct RmsLmHeadDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsLmHeadArgs>(ins);
        float* red = dev::reduce_scratch(ctx);  // (n_warps) best values, then (n_warps) their indices
        float* xn = dev::vector_scratch(ctx);   // (d_model) fp32
        dev::rms_norm(ctx.f32(a.x_off), reinterpret_cast<const float*>(ctx.weights[a.norm].data), ctx.dims.norm_eps,
                      a.d_model, xn, team, red);
        float* logits = ctx.f32(a.logits_off);
        float best = -INFINITY;
        uint32_t best_row = UINT32_MAX;  // none above -inf yet (NaN never wins, as on the CPU)
        dev::for_each_row_dot(ctx, team, tiles, xn, a.d_model, [&](const DeviceTile&, uint32_t row, float dot) {
            if (team.lane() == 0) logits[row] = dot;
            if (dot > best) best = dot, best_row = row;
        });
        if (team.lane() == 0) {
            red[team.warp()] = best;
            red[32 + team.warp()] = __uint_as_float(best_row);
        }
        team.sync();
        if (team.rank == 0) {
            for (uint32_t w = 1; w < team.n_warps(); ++w) {
                const float value = red[w];
                const uint32_t row = __float_as_uint(red[32 + w]);
                if (value > best || (value == best && row < best_row)) best = value, best_row = row;
            }
            if (best_row == UINT32_MAX) best_row = a.row_begin;
            uint8_t* slot = ctx.arena + a.argmax_off + 8ull * a.block;  // {f32 value, i32 index}
            *reinterpret_cast<float*>(slot) = best;
            *reinterpret_cast<int32_t*>(slot + 4) = int32_t(best_row);
        }
        team.sync();  // the scratch is free again when run returns
    }
};

}  // namespace mk

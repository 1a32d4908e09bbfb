// rms_gate_up on the device: RMSNorm into scratch, then (gate chunk, up chunk) tile pairs of the same
// rows. A row falls to the same warp in both tiles, so lane 0 parks the gate dot in act[row] (the
// op's own output) and combines it when the up dot arrives: no limit on rows per tile from scratch.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/rms_gate_up/rms_gate_up.hpp"

namespace mk {

struct RmsGateUpDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsGateUpArgs>(ins);
        float* xn = dev::vector_scratch(ctx);  // (d_model) fp32
        dev::rms_norm(ctx.f32(a.x_off), reinterpret_cast<const float*>(ctx.weights[a.norm].data), ctx.dims.norm_eps,
                      a.d_model, xn, team, dev::reduce_scratch(ctx));
        float* act = ctx.f32(a.act_off);
        dev::for_each_row_dot(ctx, team, tiles, xn, a.d_model, [&](const DeviceTile& tile, uint32_t row, float dot) {
            if (team.lane() != 0) return;
            if (tile.weight == a.gate) act[row] = dot;
            else act[row] = dev::silu(act[row]) * dot;
        });
    }
};

}  // namespace mk

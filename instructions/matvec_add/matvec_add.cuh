// matvec_add on the device: x[row] += W[row] . in (or = with store), one warp per row of each tile.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/matvec_add/matvec_add.hpp"

namespace mk {

struct MatvecAddDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<MatvecAddArgs>(ins);
        const float* in = ctx.f32(a.in_off);  // an arena buffer: 256-byte aligned, as row_dot needs
        float* x = ctx.f32(a.x_off);
        dev::for_each_row_dot(ctx, team, tiles, in, a.cols, [&](const DeviceTile&, uint32_t row, float dot) {
            if (team.lane() == 0) x[row] = a.store ? dot : x[row] + dot;
        });
    }
};

}  // namespace mk

// matvec_add on the device: x[row] += W[row] . in (or = with store), rows split over the warps by
// for_each_row_dot. The input is staged in the team scratch when it fits (the O-projection's 2048 fp32
// fit, the down-projection's 8192 do not): every row's dot then reads it from shared memory, not L2.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/matvec_add/matvec_add.hpp"

namespace mk {

struct MatvecAddDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<MatvecAddArgs>(ins);
        const float* in = ctx.f32(a.in_off);  // an arena buffer: 256-byte aligned, as row_dot needs
        if (a.cols + dev::kReduceFloats <= ctx.scratch_floats) {
            float* staged = dev::vector_scratch(ctx);  // (cols) fp32, 16-byte aligned
            for (uint32_t i = team.rank; i < a.cols; i += team.size) staged[i] = in[i];
            team.sync();
            in = staged;
        }
        float* x = ctx.f32(a.x_off);
        dev::for_each_row_dot(ctx, team, tiles, in, a.cols, [&](const DeviceTile&, uint32_t row, float dot) {
            if (team.lane() == 0) x[row] = a.store ? dot : x[row] + dot;
        });
    }
};

}  // namespace mk

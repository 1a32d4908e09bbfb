// embed on the device: the step token's row of the embedding table, read in place (it has no page
// plan) and dequantized by the whole team.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/embed/embed.hpp"

namespace mk {

struct EmbedDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<EmbedArgs>(ins);
        const DeviceWeight& w = ctx.weights[a.weight];
        float* x = ctx.f32(a.x_off);
        // The host validates tokens; a bad one here must still not read outside the table.
        if (ctx.token < 0 || uint32_t(ctx.token) >= w.rows) {
            for (uint32_t i = team.rank; i < a.d_model; i += team.size) x[i] = 0.0f;
            return;
        }
        dev::dequantize_row(w.dtype, w.data + uint64_t(ctx.token) * w.row_bytes, x, a.d_model, team);
    }
};

}  // namespace mk

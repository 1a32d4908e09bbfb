// last_token_row on the device: the team copies the step's last row, a float a thread.
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/last_token_row/last_token_row.hpp"

namespace mk {

struct LastTokenRowDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<LastTokenRowArgs>(ins);
        const uint32_t n = dev::step_tokens(ctx, a.n_tok);
        if (n == 0) return;
        const float* src = ctx.f32(a.src_off) + uint64_t(n - 1) * a.width;
        float* dst = ctx.f32(a.dst_off);
        for (uint32_t i = team.rank; i < a.width; i += team.size) dst[i] = src[i];
    }
};

}  // namespace mk

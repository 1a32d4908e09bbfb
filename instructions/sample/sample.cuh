// sample on the device, greedy only (the host samples otherwise): the LM-head blocks' argmaxes
// reduced in block order, so the lowest index wins ties exactly as on the CPU.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/sample/sample.hpp"

namespace mk {

struct SampleDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<SampleArgs>(ins);
        if (team.rank != 0) return;  // a few hundred blocks: one thread, the CPU's order
        const uint8_t* slots = ctx.arena + a.argmax_off;  // (n_blocks) x {f32 value, i32 index}
        float best = 0.0f;
        int32_t token = -1;
        for (uint32_t b = 0; b < a.n_blocks; ++b) {
            const float value = *reinterpret_cast<const float*>(slots + 8ull * b);
            const int32_t index = *reinterpret_cast<const int32_t*>(slots + 8ull * b + 4);
            if (token < 0 || value > best) {
                best = value;
                token = index;
            }
        }
        *reinterpret_cast<int32_t*>(ctx.arena + a.token_off) = token;
    }
};

}  // namespace mk

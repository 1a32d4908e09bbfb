// attn_reduce on the device: thread r computes output values r, r + size, ... of the group's heads;
// each recomputes its head's max and total over the parts in part order (a few loads, no sync), so
// the sums run in the CPU's order.
#pragma once
#include "instructions/attn_reduce/attn_reduce.hpp"
#include "instructions/common/device_math.cuh"

namespace mk {

struct AttnReduceDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<AttnReduceArgs>(ins);
        const uint32_t hd = a.head_dim;
        for (uint32_t e = team.rank; e < a.group * hd; e += team.size) {
            const uint32_t h = a.kv_head * a.group + e / hd, i = e % hd;
            const float* ml = ctx.f32(a.ml_off) + uint64_t(h) * a.n_parts * 2;  // (n_parts, 2)
            const float* o = ctx.f32(a.o_off) + uint64_t(h) * a.n_parts * hd;  // (n_parts, hd)
            float m = -INFINITY;
            for (uint32_t p = 0; p < a.n_parts; ++p)
                if (ml[2 * p + 1] > 0.0f) m = fmaxf(m, ml[2 * p]);
            float total = 0.0f, sum = 0.0f;
            for (uint32_t p = 0; p < a.n_parts; ++p) {
                if (ml[2 * p + 1] <= 0.0f) continue;  // empty chunk
                const float w = expf(ml[2 * p] - m);
                total += w * ml[2 * p + 1];
                sum += w * o[uint64_t(p) * hd + i];
            }
            ctx.f32(a.out_off)[uint64_t(h) * hd + i] = sum * (1.0f / total);
        }
    }
};

}  // namespace mk

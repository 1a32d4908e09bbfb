// reduce_add on the device: thread r owns rows row_begin + r, + size, ...; each sums the ranks' slots
// in slot order from 0.0f, then adds the sum into x — the CPU's order of rounded adds, so every rank
// (and the CPU backend) gets the same bits. __fadd_rn keeps each add a separate rounding.
#pragma once
#include "instructions/device.cuh"
#include "instructions/reduce_add/reduce_add.hpp"

namespace mk {

struct ReduceAddDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<ReduceAddArgs>(ins);
        float* x = ctx.f32(a.x_off);  // recv: (n_slots, slot_bytes / 4) fp32, addressed as the CPU does
        for (uint32_t r = a.row_begin + team.rank; r < a.row_begin + a.n_rows; r += team.size) {
            float sum = 0.0f;
            for (uint32_t k = 0; k < a.n_slots; ++k) sum = __fadd_rn(sum, ctx.f32(a.recv_off + k * a.slot_bytes)[r]);
            x[r] = __fadd_rn(x[r], sum);
        }
    }
};

}  // namespace mk

// reduce_add on the CPU.
#include "instructions/reduce_add/reduce_add.hpp"

#include <fmt/format.h>

#include "models/error.hpp"

namespace mk {

void ReduceAddOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<ReduceAddArgs>(ins);
    float* x = ctx.f32(a.x_off);
    for (uint32_t r = a.row_begin; r < a.row_begin + a.n_rows; ++r) {
        float sum = 0.0f;
        for (uint32_t k = 0; k < a.n_slots; ++k) sum += ctx.f32(a.recv_off + k * a.slot_bytes)[r];
        x[r] += sum;
    }
}

void ReduceAddOp::fail_slots(const ReduceAddArgs& a) {
    fail("reduce_add: {} ranks' partial results, expected 1..{}", a.n_slots, kMaxSlots);
}

std::string ReduceAddOp::describe(const Instruction& ins) {
    auto a = decode_args<ReduceAddArgs>(ins);
    return fmt::format("reduce_add rows [{}, {}) of {} ranks", a.row_begin, a.row_begin + a.n_rows, a.n_slots);
}

}  // namespace mk

// rms_lm_head on the CPU.
#include "instructions/rms_lm_head/rms_lm_head.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <vector>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void RmsLmHeadOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsLmHeadArgs>(ins);
    thread_local std::vector<float> xn;
    xn.resize(a.d_model);
    rms_norm(ctx.f32(a.x_off), ctx.weights[a.norm], ctx.dims->norm_eps, a.d_model, xn.data());
    float* logits = ctx.f32(a.logits_off);
    const DType dtype = ctx.weights[a.weight].dtype;
    RowDots dots(ctx, xn.data(), a.d_model);
    for_each_tile_row(ctx, a.weight, [&](uint32_t row, const uint8_t* bytes) {
        logits[row] = dots.dot(dtype, bytes);
    });
    float best = -std::numeric_limits<float>::infinity();
    int32_t best_index = int32_t(a.row_begin);
    for (uint32_t r = a.row_begin; r < a.row_begin + a.n_rows; ++r) {
        if (logits[r] > best) {
            best = logits[r];
            best_index = int32_t(r);
        }
    }
    uint8_t* slot = ctx.arena + a.argmax_off + 8ull * a.block;
    std::memcpy(slot, &best, 4);
    std::memcpy(slot + 4, &best_index, 4);
}

std::string RmsLmHeadOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsLmHeadArgs>(ins);
    return fmt::format("rms_lm_head rows [{}, {}) block {}", a.row_begin, a.row_begin + a.n_rows, a.block);
}

}  // namespace mk

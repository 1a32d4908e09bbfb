// embed on the CPU.
#include "instructions/embed/embed.hpp"

#include <fmt/format.h>

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

void EmbedOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<EmbedArgs>(ins);
    const WeightRef& w = ctx.weights[a.weight];
    const int32_t token = ctx.step->token;
    if (token < 0 || uint32_t(token) >= w.rows) fail("embed: token id {} outside the vocabulary ({})", token, w.rows);
    dequantize_row(w.dtype, w.row(uint32_t(token)), ctx.f32(a.x_off), a.d_model);
}

std::string EmbedOp::describe(const Instruction& ins) {
    auto a = decode_args<EmbedArgs>(ins);
    return fmt::format("embed w={} x@{} d={}", a.weight, a.x_off, a.d_model);
}

}  // namespace mk

// last_token_row on the CPU.
#include "instructions/last_token_row/last_token_row.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace mk {

void LastTokenRowOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<LastTokenRowArgs>(ins);
    const uint32_t n = step_tokens(*ctx.step, a.n_tok);
    if (n == 0) return;
    const float* src = ctx.f32(a.src_off) + size_t(n - 1) * a.width;
    std::copy(src, src + a.width, ctx.f32(a.dst_off));
}

std::string LastTokenRowOp::describe(const Instruction& ins) {
    auto a = decode_args<LastTokenRowArgs>(ins);
    return fmt::format("last_token_row @{} -> @{} width {} T={}", a.src_off, a.dst_off, a.width, a.n_tok);
}

}  // namespace mk

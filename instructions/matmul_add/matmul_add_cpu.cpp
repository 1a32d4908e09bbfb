// matmul_add on the CPU: each staged weight row against the chunk's columns, then added into every row of x.
#include "instructions/matmul_add/matmul_add.hpp"

#include <fmt/format.h>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void MatmulAddOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<MatmulAddArgs>(ins);
    const TokenBlock run = run_token_block(a.tokens(), step_tokens(*ctx.step, a.n_tok));
    const uint32_t n = run.count();
    float* x = ctx.f32(a.x_off) + size_t(run.begin) * a.x_width;
    ColumnDots dots(ctx, ctx.f32(a.in_off) + size_t(run.begin) * a.cols, a.cols, n);
    for_each_tile_row_dots(ctx, a.weight, dots, n, [&](uint32_t row, const float* dot) {
        for (uint32_t j = 0; j < n; ++j) {
            float& out = x[size_t(j) * a.x_width + row];
            out = a.store ? dot[j] : out + dot[j];
        }
    });
}

std::string MatmulAddOp::describe(const Instruction& ins) {
    auto a = decode_args<MatmulAddArgs>(ins);
    const TokenBlock tokens = a.tokens();
    return fmt::format("matmul_add w={} rows [{}, {}) k={} tokens [{}, {}) T={}{}", a.weight, a.row_begin,
                       a.row_begin + a.n_rows, a.cols, tokens.begin, tokens.end, a.n_tok, a.store ? " store" : "");
}

}  // namespace mk

// matmul_add on the CPU: each staged weight row against the chunk's columns, then added into every row of x.
#include "instructions/matmul_add/matmul_add.hpp"

#include <fmt/format.h>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void MatmulAddOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<MatmulAddArgs>(ins);
    const uint32_t n = step_tokens(*ctx.step, a.n_tok);
    float* x = ctx.f32(a.x_off);
    ColumnDots dots(ctx, ctx.f32(a.in_off), a.cols, n);
    for_each_tile_row_dots(ctx, a.weight, dots, n, [&](uint32_t row, const float* dot) {
        for (uint32_t j = 0; j < n; ++j) {
            float& out = x[size_t(j) * a.x_width + row];
            out = a.store ? dot[j] : out + dot[j];
        }
    });
}

std::string MatmulAddOp::describe(const Instruction& ins) {
    auto a = decode_args<MatmulAddArgs>(ins);
    return fmt::format("matmul_add w={} rows [{}, {}) k={} T={}{}", a.weight, a.row_begin, a.row_begin + a.n_rows,
                       a.cols, a.n_tok, a.store ? " store" : "");
}

}  // namespace mk

// matvec_add on the CPU.
#include "instructions/matvec_add/matvec_add.hpp"

#include <fmt/format.h>

#include "instructions/common/cpu_math.hpp"

namespace mk {

void MatvecAddOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<MatvecAddArgs>(ins);
    const float* in = ctx.f32(a.in_off);
    float* x = ctx.f32(a.x_off);
    const DType dtype = ctx.weights[a.weight].dtype;
    RowDots dots(ctx, in, a.cols);
    for_each_tile_row(ctx, a.weight, [&](uint32_t row, const uint8_t* bytes) {
        const float dot = dots.dot(dtype, bytes);
        x[row] = a.store ? dot : x[row] + dot;
    });
}

std::string MatvecAddOp::describe(const Instruction& ins) {
    auto a = decode_args<MatvecAddArgs>(ins);
    return fmt::format("matvec_add w={} rows [{}, {}) k={}{}", a.weight, a.row_begin, a.row_begin + a.n_rows, a.cols,
                       a.store ? " (store)" : "");
}

}  // namespace mk

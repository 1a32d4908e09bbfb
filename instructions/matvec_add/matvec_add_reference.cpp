// matvec_add's float64 reference and cases: row blocks of every stored format, added or stored.
#include "instructions/matvec_add/matvec_add.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> MatvecAddOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<MatvecAddArgs>(ins);
    const std::vector<double> in = ref_f32(b, a.in_off, a.cols);
    std::vector<double> x = ref_f32(b, a.x_off + 4ull * a.row_begin, a.n_rows);
    for (uint32_t r = 0; r < a.n_rows; ++r) {
        const double dot = ref_dot(ref_row(b, a.weight, a.row_begin + r), in);
        x[r] = a.store ? dot : x[r] + dot;
    }
    return {ref_arena("x", a.x_off + 4ull * a.row_begin, std::move(x))};
}

std::vector<OpCase> MatvecAddOp::cases(uint64_t seed) {
    struct Shape { uint32_t rows, cols, row_begin, n_rows, store; };
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{64, 256, 16, 40, 0}, Shape{96, 512, 0, 96, 1}}) {
            CaseBuilder c(ModelDims{.d_model = s.rows}, seed++);
            const uint32_t weight = c.weight(dtype, s.rows, s.cols, 0.5f);
            const uint32_t in = c.activation(s.cols), x = c.activation(s.rows);
            out.push_back(c.finish(fmt::format("matvec_add {} {}x{} rows [{}, {}){}", dtype_name(dtype), s.rows, s.cols,
                                               s.row_begin, s.row_begin + s.n_rows, s.store ? " store" : ""),
                                   make_instruction<MatvecAddOp>({weight, s.row_begin, s.n_rows, s.cols, in, x, s.store})));
        }
    return out;
}

}  // namespace mk

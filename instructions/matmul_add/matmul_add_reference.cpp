// matmul_add's float64 reference and cases: row blocks of every stored format, full and shorter chunks.
#include "instructions/matmul_add/matmul_add.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> MatmulAddOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<MatmulAddArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok);
    const TokenBlock tokens = a.tokens();
    std::vector<Expected> out;
    for (uint32_t j = tokens.begin; j < tokens.end; ++j) {
        const uint64_t x_row = a.x_off + 4ull * (uint64_t(j) * a.x_width + a.row_begin);
        std::vector<double> x = ref_f32(b, x_row, a.n_rows);
        if (j < n) {
            const std::vector<double> in = ref_f32(b, a.in_off + 4ull * j * a.cols, a.cols);
            for (uint32_t r = 0; r < a.n_rows; ++r)
                x[r] = (a.store ? 0.0 : x[r]) + ref_dot(ref_row(b, a.weight, a.row_begin + r), in);
        }
        out.push_back(ref_arena(fmt::format("x[{}]", j), x_row, std::move(x)));
    }
    return out;
}

// Token blocks: the whole chunk (count 0), a block inside it, and a tail block the step cuts short.
std::vector<OpCase> MatmulAddOp::cases(uint64_t seed) {
    struct Shape { uint32_t rows, cols, row_begin, n_rows, n_tok, n, store, tok_begin, tok_count; };
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{64, 256, 16, 40, 4, 4, 0, 0, 0}, Shape{48, 512, 0, 48, 7, 5, 0, 0, 0},
                               Shape{40, 256, 8, 24, 5, 3, 1, 0, 0}, Shape{64, 256, 8, 24, 40, 40, 0, 16, 16},
                               Shape{48, 256, 0, 48, 40, 37, 1, 32, 8},
                               Shape{40, 64, 0, 40, 104, 101, 0, 0, 0},  // 13 8-token chunks: passes of 4 tiles
                               Shape{32, 1024, 0, 32, 16, 16, 0, 0, 0}}) {  // MMA slices: 480 + 480 + 64, Q8_0 768 + 256
            // the tensor cores' 2-chunk shape: their formats only (64 columns: Q8_0, Q4_0 and Q4_1 in whole-row slices)
            if (s.n_tok > 64 && (dtype == DType::F32 || dtype == DType::Q4_K || dtype == DType::Q6_K)) continue;
            CaseBuilder c(ModelDims{.d_model = s.rows}, seed++);
            const uint32_t weight = c.weight(dtype, s.rows, s.cols, 0.5f);
            const uint32_t in = c.activation(uint64_t(s.n_tok) * s.cols), x = c.activation(uint64_t(s.n_tok) * s.rows);
            c.buffers().step.n_tokens = int32_t(s.n);
            const MatmulAddArgs a{weight, s.row_begin, s.n_rows, s.cols, in, x, s.rows, s.n_tok, s.store, s.tok_begin,
                                  s.tok_count};
            const TokenBlock tokens = a.tokens();
            out.push_back(c.finish(fmt::format("matmul_add {} {}x{} rows [{}, {}) tokens [{}, {}) {} of {} tokens{}",
                                               dtype_name(dtype), s.rows, s.cols, s.row_begin, s.row_begin + s.n_rows,
                                               tokens.begin, tokens.end, s.n, s.n_tok, s.store ? " store" : ""),
                                   make_instruction<MatmulAddOp>(a)));
        }
    return out;
}

}  // namespace mk

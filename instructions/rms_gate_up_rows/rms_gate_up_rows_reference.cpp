// rms_gate_up_rows' float64 reference and cases: gate/up row blocks of every stored format, full and shorter chunks.
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.hpp"

#include <fmt/format.h>

#include <cmath>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> RmsGateUpRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsGateUpRowsArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok);
    const TokenBlock tokens = a.tokens();
    std::vector<Expected> out;
    for (uint32_t j = tokens.begin; j < tokens.end; ++j) {
        const uint64_t off = a.act_off + 4ull * (uint64_t(j) * a.d_ff + a.row_begin);
        std::vector<double> act = ref_f32(b, off, a.n_rows);  // left as it is past the step's tokens
        if (j < n) {
            const std::vector<double> xn = ref_rms_norm(b, ref_f32(b, a.x_off + 4ull * j * a.d_model, a.d_model), a.norm);
            for (uint32_t r = 0; r < a.n_rows; ++r) {
                const double gate = ref_dot(ref_row(b, a.gate, a.row_begin + r), xn);
                const double up = ref_dot(ref_row(b, a.up, a.row_begin + r), xn);
                act[r] = gate / (1.0 + std::exp(-gate)) * up;
            }
        }
        out.push_back(ref_arena(fmt::format("act[{}]", j), off, std::move(act)));
    }
    return out;
}

// Token blocks: the whole chunk (count 0), a block inside it, and a tail block the step cuts short.
std::vector<OpCase> RmsGateUpRowsOp::cases(uint64_t seed) {
    struct Shape { uint32_t d_model, d_ff, row_begin, n_rows, n_tok, n, tok_begin, tok_count; };
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{256, 96, 32, 48, 3, 3, 0, 0}, Shape{512, 64, 0, 64, 5, 2, 0, 0},
                               Shape{256, 64, 16, 32, 48, 48, 16, 16}, Shape{256, 64, 0, 64, 40, 35, 32, 0},
                               Shape{576, 48, 16, 32, 16, 13, 0, 0}}) {  // SmolLM2's width: Q4 rows in whole-row slices
            if (s.d_model == 576 && dtype != DType::Q4_0 && dtype != DType::Q4_1) continue;
            CaseBuilder c(ModelDims{.d_model = s.d_model, .d_ff = s.d_ff}, seed++);
            const uint32_t gate = c.weight(dtype, s.d_ff, s.d_model, 0.5f), up = c.weight(dtype, s.d_ff, s.d_model, 0.5f);
            const uint32_t norm = c.weight(DType::F32, 1, s.d_model);
            const uint32_t x = c.activation(uint64_t(s.n_tok) * s.d_model), act = c.activation(uint64_t(s.n_tok) * s.d_ff);
            c.buffers().step.n_tokens = int32_t(s.n);
            const RmsGateUpRowsArgs a{0, s.row_begin, s.n_rows, s.d_model, x, act, gate, up, norm, s.d_ff, s.n_tok,
                                      s.tok_begin, s.tok_count};
            const TokenBlock tokens = a.tokens();
            out.push_back(c.finish(fmt::format("rms_gate_up_rows {} {}x{} rows [{}, {}) tokens [{}, {}) {} of {} tokens",
                                               dtype_name(dtype), s.d_ff, s.d_model, s.row_begin, s.row_begin + s.n_rows,
                                               tokens.begin, tokens.end, s.n, s.n_tok),
                                   make_instruction<RmsGateUpRowsOp>(a)));
        }
    return out;
}

}  // namespace mk

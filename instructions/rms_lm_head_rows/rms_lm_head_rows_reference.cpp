// rms_lm_head_rows' float64 reference and cases: the last token's or every token's logits, full and shorter chunks.
#include "instructions/rms_lm_head_rows/rms_lm_head_rows.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> RmsLmHeadRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsLmHeadRowsArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok);
    std::vector<Expected> out;
    const TokenBlock rows = a.tokens();  // the logits rows it writes
    for (uint32_t k = rows.begin; k < rows.end; ++k) {
        const uint32_t j = a.all ? k : n - 1;  // the token of logits row k
        const uint64_t off = a.logits_off + 4ull * (uint64_t(k) * a.vocab + a.row_begin);
        std::vector<double> logits = ref_f32(b, off, a.n_rows);  // left as they are past the step's tokens
        if (j < n) {
            const std::vector<double> xn = ref_rms_norm(b, ref_f32(b, a.x_off + 4ull * j * a.d_model, a.d_model), a.norm);
            for (uint32_t r = 0; r < a.n_rows; ++r) logits[r] = ref_dot(ref_row(b, a.weight, a.row_begin + r), xn);
        }
        out.push_back(ref_arena(fmt::format("logits[{}]", k), off, std::move(logits)));
    }
    return out;
}

std::vector<OpCase> RmsLmHeadRowsOp::cases(uint64_t seed) {
    struct Shape { uint32_t vocab, row_begin, n_rows, n_tok, n, all, tok_begin = 0, tok_count = 0; };
    const uint32_t d_model = 256;
    std::vector<OpCase> out;
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q6_K})
        // All logits of 11 tokens: BF16 in MMA tiles; token blocks of a longer chunk: a middle one in MMA tiles, one
        // cut short by the step, one past it (nothing to write).
        for (const Shape& s : {Shape{80, 16, 48, 4, 3, 0}, Shape{64, 0, 64, 3, 3, 1}, Shape{64, 8, 24, 5, 2, 1},
                               Shape{80, 8, 40, 12, 11, 1}, Shape{80, 16, 32, 40, 40, 1, 8, 16},
                               Shape{64, 0, 48, 32, 21, 1, 16, 16}, Shape{64, 8, 16, 32, 12, 1, 16, 8}}) {
            CaseBuilder c(ModelDims{.d_model = d_model, .vocab = s.vocab}, seed++);
            const uint32_t weight = c.weight(dtype, s.vocab, d_model, 0.5f), norm = c.weight(DType::F32, 1, d_model);
            const uint32_t x = c.activation(uint64_t(s.n_tok) * d_model);
            const uint32_t logits = c.activation(uint64_t(s.all ? s.n_tok : 1) * s.vocab);
            c.buffers().step.n_tokens = int32_t(s.n);
            const std::string block = s.tok_count ? fmt::format(" block [{}, {})", s.tok_begin, s.tok_begin + s.tok_count) : "";
            out.push_back(c.finish(fmt::format("rms_lm_head_rows {} rows [{}, {}) {} of {} tokens{}{}", dtype_name(dtype),
                                               s.row_begin, s.row_begin + s.n_rows, s.n, s.n_tok, s.all ? " all" : "", block),
                                   make_instruction<RmsLmHeadRowsOp>({s.row_begin, s.n_rows, d_model, x, logits, weight,
                                                                      norm, s.vocab, s.n_tok, s.all, s.tok_begin,
                                                                      s.tok_count})));
        }
    return out;
}

}  // namespace mk

// rms_lm_head's float64 reference and cases: a block of logits of norm(x) and the block's argmax slot.
#include "instructions/rms_lm_head/rms_lm_head.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> RmsLmHeadOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsLmHeadArgs>(ins);
    const std::vector<double> xn = ref_rms_norm(b, ref_f32(b, a.x_off, a.d_model), a.norm);
    std::vector<double> logits(a.n_rows);
    for (uint32_t r = 0; r < a.n_rows; ++r) logits[r] = ref_dot(ref_row(b, a.weight, a.row_begin + r), xn);
    const uint64_t slot = a.argmax_off + 8ull * a.block;
    const double best = *std::max_element(logits.begin(), logits.end());
    Expected index{"argmax index", Space::arena, slot + 4, logits, Check::argmax, int32_t(a.row_begin)};
    return {ref_arena("logits", a.logits_off + 4ull * a.row_begin, std::move(logits)),
            ref_arena("argmax value", slot, {best}), std::move(index)};
}

std::vector<OpCase> RmsLmHeadOp::cases(uint64_t seed) {
    struct Shape { uint32_t d_model, vocab, row_begin, n_rows, block; };
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{256, 80, 16, 48, 1}, Shape{512, 40, 0, 40, 0}}) {
            CaseBuilder c(ModelDims{.d_model = s.d_model, .vocab = s.vocab}, seed++);
            const uint32_t weight = c.weight(dtype, s.vocab, s.d_model, 0.5f);
            const uint32_t norm = c.weight(DType::F32, 1, s.d_model);
            const uint32_t x = c.activation(s.d_model), logits = c.activation(s.vocab), argmax = c.activation(4);
            out.push_back(c.finish(fmt::format("rms_lm_head {} {}x{} rows [{}, {})", dtype_name(dtype), s.vocab,
                                               s.d_model, s.row_begin, s.row_begin + s.n_rows),
                                   make_instruction<RmsLmHeadOp>(
                                       {s.row_begin, s.n_rows, s.block, s.d_model, x, logits, argmax, weight, norm})));
        }
    return out;
}

}  // namespace mk

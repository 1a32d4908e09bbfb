// last_token_row's reference and cases: the chunk's last row, a shorter step's, and a step of no tokens.
#include "instructions/last_token_row/last_token_row.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> LastTokenRowOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<LastTokenRowArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok);
    // Row n - 1 of the source; with no tokens the destination stays as it was.
    const uint64_t from = n > 0 ? a.src_off + 4ull * (n - 1) * a.width : a.dst_off;
    return {ref_arena("dst", a.dst_off, ref_f32(b, from, a.width))};
}

std::vector<OpCase> LastTokenRowOp::cases(uint64_t seed) {
    struct Shape { uint32_t width, n_tok; int32_t n; };
    std::vector<OpCase> out;
    for (const Shape& s : {Shape{96, 7, 7}, Shape{96, 7, 3}, Shape{2048, 1, 1}, Shape{64, 5, 0}}) {
        CaseBuilder c(ModelDims{.d_model = s.width}, seed++);
        const uint32_t src = c.activation(uint64_t(s.n_tok) * s.width), dst = c.activation(s.width);
        c.buffers().step.n_tokens = s.n;
        const std::string which = s.n > 0 ? fmt::format("token {} of {}", s.n - 1, s.n_tok) : "no token run";
        out.push_back(c.finish(fmt::format("last_token_row width {}: {}", s.width, which),
                               make_instruction<LastTokenRowOp>(LastTokenRowArgs{src, dst, s.width, s.n_tok})));
    }
    return out;
}

}  // namespace mk

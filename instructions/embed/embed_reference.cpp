// embed's float64 reference and cases: the token's row, in every stored format.
#include "instructions/embed/embed.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> EmbedOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<EmbedArgs>(ins);
    return {ref_arena("x", a.x_off, ref_row(b, a.weight, uint32_t(b.step.token)))};
}

std::vector<OpCase> EmbedOp::cases(uint64_t seed) {
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (uint32_t d_model : {256u, 512u}) {
            const ModelDims dims{.d_model = d_model, .vocab = 40};
            CaseBuilder c(dims, seed++);
            const uint32_t weight = c.weight(dtype, dims.vocab, d_model);
            const uint32_t x = c.activation(d_model);
            c.buffers().step.token = int32_t(c.below(dims.vocab));
            out.push_back(c.finish(fmt::format("embed {} d={}", dtype_name(dtype), d_model),
                                   make_instruction<EmbedOp>({weight, x, d_model})));
        }
    return out;
}

}  // namespace mk

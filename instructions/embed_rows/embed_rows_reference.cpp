// embed_rows' float64 reference and cases: a full chunk and a shorter last one, in every stored format.
#include "instructions/embed_rows/embed_rows.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> EmbedRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<EmbedRowsArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok);
    std::vector<double> x = ref_f32(b, a.x_off, uint64_t(a.n_tok) * a.d_model);  // rows past n stay
    for (uint32_t j = 0; j < n; ++j) {
        int32_t token;
        std::memcpy(&token, &b.arena[a.tokens_off + 4ull * j], 4);
        const std::vector<double> row = ref_row(b, a.weight, uint32_t(token));
        std::copy(row.begin(), row.end(), x.begin() + int64_t(j) * a.d_model);
    }
    return {ref_arena("x", a.x_off, std::move(x))};
}

std::vector<OpCase> EmbedRowsOp::cases(uint64_t seed) {
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (uint32_t n : {5u, 3u}) {
            const ModelDims dims{.d_model = 256, .vocab = 40};
            const uint32_t n_tok = 5;
            CaseBuilder c(dims, seed++);
            const uint32_t weight = c.weight(dtype, dims.vocab, dims.d_model);
            const uint32_t tokens = c.activation(n_tok), x = c.activation(uint64_t(n_tok) * dims.d_model);
            std::vector<float> ids(n_tok);
            for (float& id : ids) id = std::bit_cast<float>(int32_t(c.below(dims.vocab)));
            c.fill(tokens, ids);
            c.buffers().step.n_tokens = int32_t(n);
            out.push_back(c.finish(fmt::format("embed_rows {} {} of {} tokens", dtype_name(dtype), n, n_tok),
                                   make_instruction<EmbedRowsOp>({weight, tokens, x, dims.d_model, n_tok})));
        }
    return out;
}

}  // namespace mk

// embed_rows' float64 reference and cases: a full chunk and a shorter last one, the whole chunk and token blocks
// (one cut short by the shorter chunk, one past it), in every stored format.
#include "instructions/embed_rows/embed_rows.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> EmbedRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<EmbedRowsArgs>(ins);
    const TokenBlock block = token_block(a.tok_begin, a.tok_count, a.n_tok);
    const TokenBlock run = run_token_block(block, step_tokens(b.step, a.n_tok));
    // The block's rows (those past the step's tokens stay as they are).
    const uint32_t x_off = a.x_off + 4 * block.begin * a.d_model;
    std::vector<double> x = ref_f32(b, x_off, uint64_t(block.count()) * a.d_model);
    for (uint32_t j = run.begin; j < run.end; ++j) {
        int32_t token;
        std::memcpy(&token, &b.arena[a.tokens_off + 4ull * j], 4);
        const std::vector<double> row = ref_row(b, a.weight, uint32_t(token));
        std::copy(row.begin(), row.end(), x.begin() + int64_t(j - block.begin) * a.d_model);
    }
    return {ref_arena("x", x_off, std::move(x))};
}

std::vector<OpCase> EmbedRowsOp::cases(uint64_t seed) {
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (uint32_t n : {5u, 3u})
            for (uint32_t tok_begin : {0u, 1u, 4u}) {
                const ModelDims dims{.d_model = 256, .vocab = 40};
                const uint32_t n_tok = 5;
                CaseBuilder c(dims, seed++);
                const uint32_t weight = c.weight(dtype, dims.vocab, dims.d_model);
                const uint32_t tokens = c.activation(n_tok), x = c.activation(uint64_t(n_tok) * dims.d_model);
                std::vector<float> ids(n_tok);
                for (float& id : ids) id = std::bit_cast<float>(int32_t(c.below(dims.vocab)));
                c.fill(tokens, ids);
                c.buffers().step.n_tokens = int32_t(n);
                // tok_begin 1: tokens [1, 4), cut to [1, 3) by a 3-token step; 4: [4, 5), none of a 3-token step's
                const uint32_t tok_count = tok_begin == 1 ? 3 : 0;
                out.push_back(c.finish(fmt::format("embed_rows {} {} of {} tokens, block from {}", dtype_name(dtype), n,
                                                   n_tok, tok_begin),
                                       make_instruction<EmbedRowsOp>(
                                           {weight, tokens, x, dims.d_model, n_tok, tok_begin, tok_count})));
            }
    return out;
}

}  // namespace mk

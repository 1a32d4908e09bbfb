// embed_rows on the CPU.
#include "instructions/embed_rows/embed_rows.hpp"

#include <fmt/format.h>

#include <cstring>

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

void EmbedRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<EmbedRowsArgs>(ins);
    const WeightRef& w = ctx.weights[a.weight];
    const TokenBlock block =
        run_token_block(token_block(a.tok_begin, a.tok_count, a.n_tok), step_tokens(*ctx.step, a.n_tok));
    for (uint32_t j = block.begin; j < block.end; ++j) {
        int32_t token;
        std::memcpy(&token, ctx.arena + a.tokens_off + 4ull * j, 4);
        if (token < 0 || uint32_t(token) >= w.rows) fail("embed_rows: token id {} outside the vocabulary ({})", token, w.rows);
        dequantize_row(w.dtype, w.row(uint32_t(token)), ctx.f32(a.x_off) + size_t(j) * a.d_model, a.d_model);
    }
}

std::string EmbedRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<EmbedRowsArgs>(ins);
    const TokenBlock b = token_block(a.tok_begin, a.tok_count, a.n_tok);
    return fmt::format("embed_rows w={} x@{} d={} tokens [{}, {}) T={}", a.weight, a.x_off, a.d_model, b.begin, b.end,
                       a.n_tok);
}

}  // namespace mk

// embed_rows on the device: each of the block's step tokens' embedding rows (token ids in the arena), read in place
// (no page plan) and dequantized by the whole team, one token after another.
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/embed_rows/embed_rows.hpp"

namespace mk {

struct EmbedRowsDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<EmbedRowsArgs>(ins);
        const DeviceWeight& w = ctx.weights[a.weight];
        const int32_t* tokens = reinterpret_cast<const int32_t*>(ctx.arena + a.tokens_off);  // (n_tok) i32
        const TokenBlock block =
            run_token_block(token_block(a.tok_begin, a.tok_count, a.n_tok), dev::step_tokens(ctx, a.n_tok));
        for (uint32_t j = block.begin; j < block.end; ++j) {
            float* x = ctx.f32(a.x_off) + uint64_t(j) * a.d_model;
            const int32_t token = tokens[j];
            // The host validates tokens; a bad one here must still not read outside the table.
            if (token < 0 || uint32_t(token) >= w.rows) {
                for (uint32_t i = team.rank; i < a.d_model; i += team.size) x[i] = 0.0f;
                continue;
            }
            dev::dequantize_row(w.dtype, w.data + uint64_t(token) * w.row_bytes, x, a.d_model, team);
        }
    }
};

}  // namespace mk

// rms_qkv_rows on the device: the token block's RMS scales into scratch, each Q/K/V row dotted with every block
// token's normed residual and written straight to its destination (q row j, or the KV cache at pos + j), then
// rms_qkv's pass over each token's rotary pairs for bias, QK-norm and RoPE at pos + j (RmsQkvDevice::finish).
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/rms_qkv/rms_qkv.cuh"
#include "instructions/rms_qkv_rows/rms_qkv_rows.hpp"

namespace mk {

struct RmsQkvRowsDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsQkvRowsArgs>(ins);
        const TokenBlock run = run_token_block(a.tokens(), dev::step_tokens(ctx, a.n_tok));
        const uint32_t hd = a.head_dim, n = run.count();
        const int32_t pos = ctx.pos + int32_t(run.begin);  // the block's first token's position
        const QkvKind kind = QkvKind(a.kind);

        // Output i (row row_begin + i) of the block's token j: element row % hd of head row / hd. A bf16 cache's K/V
        // rows are finished in fp32 in the scratch after the tokens' scales ((n, n_rows), token-major) and rounded once
        // when stored, as the CPU does (the CUDA programs keep 64 + n_tok * (n_rows + 1) floats within the scratch:
        // device_prefill_limit).
        const bool staged = kind != QkvKind::q && ctx.dims.kv_type == uint32_t(KvType::bf16);
        float* stage = dev::vector_scratch(ctx) + n;  // past the scales for_each_row_normed_dot keeps
        auto cache_index = [&](uint32_t j, uint32_t i) {
            const uint32_t row = a.row_begin + i;
            return ctx.cache_offset(a.layer, row / hd) + uint64_t(pos + int32_t(j)) * hd + row % hd;
        };
        auto out = [&](uint32_t j, uint32_t i) -> float* {
            if (kind == QkvKind::q) return ctx.f32(a.q_off) + uint64_t(run.begin + j) * ctx.dims.q_dim() + a.row_begin + i;
            if (staged) return stage + uint64_t(j) * a.n_rows + i;
            return static_cast<float*>(kind == QkvKind::k ? ctx.k_cache : ctx.v_cache) + cache_index(j, i);
        };
        dev::for_each_row_normed_dot(ctx, team, tiles, ctx.f32(a.x_off) + uint64_t(run.begin) * a.d_model, a.norm,
                                     a.d_model, n,
                                     [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                                         *out(j, row - a.row_begin) = dot;
                                     });
        team.sync();  // every dot is in place
        RmsQkvDevice::finish(ctx, team, kind, a.row_begin, a.n_rows, hd, a.bias, a.qk_norm, n, pos, out);
        if (!staged) return;
        team.sync();  // every staged row is finished
        uint16_t* cache = static_cast<uint16_t*>(kind == QkvKind::k ? ctx.k_cache : ctx.v_cache);
        for (uint32_t u = team.rank; u < n * a.n_rows; u += team.size)
            dev::kv_store(cache + cache_index(u / a.n_rows, u % a.n_rows), stage[u]);
        team.sync();  // the scratch is free when run returns
    }
};

}  // namespace mk

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

        // Output i (row row_begin + i) of the block's token j: element row % hd of head row / hd. An fp32 cache
        // only: K/V are finished in place (a bf16 cache would need the chunk's rows staged; the CUDA backends refuse prefill
        // schedules, and the op test's emulator declines the bf16 cases).
        auto out = [&](uint32_t j, uint32_t i) -> float* {
            const uint32_t row = a.row_begin + i;
            if (kind == QkvKind::q) return ctx.f32(a.q_off) + uint64_t(run.begin + j) * ctx.dims.q_dim() + row;
            float* cache = static_cast<float*>(kind == QkvKind::k ? ctx.k_cache : ctx.v_cache);
            return cache + ctx.cache_offset(a.layer, row / hd) + uint64_t(pos + int32_t(j)) * hd + row % hd;
        };
        dev::for_each_row_normed_dot(ctx, team, tiles, ctx.f32(a.x_off) + uint64_t(run.begin) * a.d_model, a.norm,
                                     a.d_model, n,
                                     [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                                         if (team.lane() == 0) *out(j, row - a.row_begin) = dot;
                                     });
        team.sync();  // every dot is in place
        RmsQkvDevice::finish(ctx, team, kind, a.row_begin, a.n_rows, hd, a.bias, a.qk_norm, n, pos, out);
    }
};

}  // namespace mk

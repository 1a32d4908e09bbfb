// rms_lm_head_rows on the device: the RMS scales of the tokens whose logits are asked for (the last, or a block's),
// then each LM-head row dotted with their normed residuals. No argmax: the host samples from the logits.
#pragma once
#include "instructions/common/rows_math.cuh"
#include "instructions/rms_lm_head_rows/rms_lm_head_rows.hpp"

namespace mk {

struct RmsLmHeadRowsDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsLmHeadRowsArgs>(ins);
        const uint32_t n = dev::step_tokens(ctx, a.n_tok);
        // The tokens whose logits are asked for: the block's that run, or the last.
        const TokenBlock run = a.all ? run_token_block(a.tokens(), n) : TokenBlock{n ? n - 1 : 0, n};
        float* logits = ctx.f32(a.logits_off) + (a.all ? uint64_t(run.begin) * a.vocab : 0);  // (count, vocab) fp32
        dev::for_each_row_normed_dot(ctx, team, tiles, ctx.f32(a.x_off) + uint64_t(run.begin) * a.d_model, a.norm,
                                     a.d_model, run.count(), [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                                         logits[uint64_t(j) * a.vocab + row] = dot;
                                     },
                                     /*may_stage=*/true);
    }
};

}  // namespace mk

// rms_lm_head_rows on the device: the RMS scales of the tokens whose logits are asked for (the last, or all),
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
        const uint32_t first = a.all || n == 0 ? 0 : n - 1, cols = n - first;  // the tokens whose logits are asked for
        float* logits = ctx.f32(a.logits_off);  // (cols, vocab) fp32
        dev::for_each_row_normed_dot(ctx, team, tiles, ctx.f32(a.x_off) + uint64_t(first) * a.d_model, a.norm, a.d_model,
                                     cols, [&](const DeviceTile&, uint32_t row, uint32_t j, float dot) {
                                         logits[uint64_t(j) * a.vocab + row] = dot;
                                     },
                                     /*may_stage=*/true);
    }
};

}  // namespace mk

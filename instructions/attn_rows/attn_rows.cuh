// attn_rows on the device: a warp per (query, head) of the block. The warp walks the query's visible positions
// 0..pos+j 32 at a time, one lane per position: the lane dots its K row with q, the warp updates the online
// softmax (block max and sum by shuffles), then accumulates the block's V rows with lane d holding dims d, d + 32,
// ... (kMaxHeadDim dims a pass). Scores are never stored, so any context length fits; no cross-warp merge.
#pragma once
#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/common/rows_math.cuh"

namespace mk {

struct AttnRowsDevice {
    static constexpr uint32_t kMaxHeadDim = 256;
    static constexpr uint32_t kDimsPerLane = kMaxHeadDim / 32;

    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        if (ctx.dims.kv_type == uint32_t(KvType::bf16)) return run_typed<uint16_t>(ins, ctx, team);
        run_typed<float>(ins, ctx, team);
    }

    // KvT: the cache's element, float or uint16_t (bf16 bits, widened as read).
    template <typename KvT>
    static __device__ void run_typed(const Instruction& ins, const DeviceOpContext& ctx, const Team& team) {
        const auto a = decode_args<AttnRowsArgs>(ins);
        const uint32_t n = dev::step_tokens(ctx, a.n_tok), hd = a.head_dim, q_dim = ctx.dims.q_dim(), lane = team.lane();
        const uint32_t q_end = min(a.q_begin + a.n_q, n);
        const uint32_t n_units = q_end > a.q_begin ? (q_end - a.q_begin) * a.group : 0;
        const KvT* keys = static_cast<const KvT*>(ctx.k_cache) + ctx.cache_offset(a.layer, a.kv_head);    // (ctx_len, hd)
        const KvT* values = static_cast<const KvT*>(ctx.v_cache) + ctx.cache_offset(a.layer, a.kv_head);  // (ctx_len, hd)
        const float scale = 1.0f / sqrtf(float(hd));
        for (uint32_t u = team.warp(); u < n_units; u += team.n_warps()) {
            const uint32_t j = a.q_begin + u / a.group, h = a.kv_head * a.group + u % a.group;
            const float* q = ctx.f32(a.q_off) + uint64_t(j) * q_dim + uint64_t(h) * hd;  // read as broadcasts
            const int32_t visible = ctx.pos + int32_t(j) + 1;
            // Dims in passes of kMaxHeadDim (one pass up to 256; a wider head recomputes the same scores).
            for (uint32_t d0 = 0; d0 < hd; d0 += kMaxHeadDim) {
                float m = -INFINITY, l = 0.0f, o[kDimsPerLane];
#pragma unroll
                for (uint32_t k = 0; k < kDimsPerLane; ++k) o[k] = 0.0f;
                for (int32_t base = 0; base < visible; base += 32) {
                    const int32_t t = base + int32_t(lane);
                    float s = -INFINITY;
                    if (t < visible) {
                        const KvT* key = keys + uint64_t(t) * hd;
                        float dot = 0.0f;
                        for (uint32_t d = 0; d < hd; ++d) dot += q[d] * dev::kv_load(key, d);
                        s = dot * scale;
                    }
                    const float m_new = fmaxf(m, dev::warp_max(s));  // finite: lane 0's position is visible
                    const float correction = expf(m - m_new);
                    const float p = t < visible ? expf(s - m_new) : 0.0f;
                    l = l * correction + dev::warp_sum(p);
                    m = m_new;
#pragma unroll
                    for (uint32_t k = 0; k < kDimsPerLane; ++k) o[k] *= correction;
                    const uint32_t n_valid = uint32_t(min(32, visible - base));
                    for (uint32_t i = 0; i < n_valid; ++i) {
                        const float p_i = __shfl_sync(0xffffffffu, p, i);
                        const KvT* v = values + uint64_t(base + int32_t(i)) * hd + d0;
#pragma unroll
                        for (uint32_t k = 0; k < kDimsPerLane; ++k)
                            if (d0 + lane + 32 * k < hd) o[k] += p_i * dev::kv_load(v, lane + 32 * k);
                    }
                }
                float* out = ctx.f32(a.out_off) + uint64_t(j) * q_dim + uint64_t(h) * hd + d0;
#pragma unroll
                for (uint32_t k = 0; k < kDimsPerLane; ++k)
                    if (d0 + lane + 32 * k < hd) out[lane + 32 * k] = o[k] / l;
            }
        }
    }
};

}  // namespace mk

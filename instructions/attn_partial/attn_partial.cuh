// attn_partial on the device: for each query head of the group, the warps split the chunk's
// positions (warp w takes begin + w, begin + w + n, ...) and each runs an online softmax, its lanes
// holding q and the output accumulator for dims lane, lane + 32, ...; the warps' (m, l, o) meet in
// scratch and are merged in warp order (deterministic, no atomics). Scores are never stored, so any
// context length fits. Head dims up to kMaxHeadDim.
#pragma once
#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/common/device_math.cuh"

namespace mk {

struct AttnPartialDevice {
    static constexpr uint32_t kMaxHeadDim = 256;
    static constexpr uint32_t kDimsPerLane = kMaxHeadDim / 32;

    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<AttnPartialArgs>(ins);
        const uint32_t hd = a.head_dim, lane = team.lane(), warp = team.warp();
        int32_t begin = 0, end = 0;
        attn_chunk(ctx.pos, a.part, a.n_parts, begin, end);
        const float* keys = ctx.k_cache + ctx.cache_offset(a.layer, a.kv_head);    // (ctx_len, hd)
        const float* values = ctx.v_cache + ctx.cache_offset(a.layer, a.kv_head);  // (ctx_len, hd)
        const float scale = 1.0f / sqrtf(float(hd));
        // Warp w's state in scratch: {m, l, o[hd]}; as many warps split positions as have a slot.
        const uint32_t stride = hd + 2;
        const uint32_t n_split = max(1u, min(team.n_warps(), ctx.scratch_floats / stride));

        for (uint32_t g = 0; g < a.group; ++g) {
            const uint32_t h = a.kv_head * a.group + g;
            if (warp < n_split) {
                const float* q = ctx.f32(a.q_off) + uint64_t(h) * hd;
                float qr[kDimsPerLane], o[kDimsPerLane];
#pragma unroll
                for (uint32_t j = 0; j < kDimsPerLane; ++j) {
                    const uint32_t d = lane + 32 * j;
                    qr[j] = d < hd ? q[d] : 0.0f;
                    o[j] = 0.0f;
                }
                float m = -INFINITY, l = 0.0f;
                for (int32_t t = begin + int32_t(warp); t < end; t += int32_t(n_split)) {
                    const float* k = keys + uint64_t(t) * hd;
                    const float* v = values + uint64_t(t) * hd;
                    float s = 0.0f;
#pragma unroll
                    for (uint32_t j = 0; j < kDimsPerLane; ++j)
                        if (lane + 32 * j < hd) s += qr[j] * k[lane + 32 * j];
                    s = dev::warp_sum(s) * scale;
                    const float m_new = fmaxf(m, s);
                    const float correction = expf(m - m_new), p = expf(s - m_new);
                    l = l * correction + p;
#pragma unroll
                    for (uint32_t j = 0; j < kDimsPerLane; ++j)
                        if (lane + 32 * j < hd) o[j] = o[j] * correction + p * v[lane + 32 * j];
                    m = m_new;
                }
                float* state = ctx.scratch + warp * stride;
                if (lane == 0) state[0] = m, state[1] = l;
#pragma unroll
                for (uint32_t j = 0; j < kDimsPerLane; ++j)
                    if (lane + 32 * j < hd) state[2 + lane + 32 * j] = o[j];
            }
            team.sync();
            merge(ctx, team, a, h, n_split, stride);
            team.sync();  // the scratch is free for the next head
        }
    }

    // Every thread finds the common max in warp order; thread r writes dims r, r + size, ...
    // Warps without positions (l = 0) are skipped, so an empty chunk writes m = -inf, l = 0, o = 0.
    static __device__ void merge(const DeviceOpContext& ctx, const Team& team, const AttnPartialArgs& a, uint32_t h,
                                 uint32_t n_split, uint32_t stride) {
        const float* states = ctx.scratch;
        float m = -INFINITY;
        for (uint32_t w = 0; w < n_split; ++w)
            if (states[w * stride + 1] > 0.0f) m = fmaxf(m, states[w * stride]);
        const uint64_t slot = uint64_t(h) * a.n_parts + a.part;
        float* o = ctx.f32(a.o_off) + slot * a.head_dim;
        for (uint32_t d = team.rank; d < a.head_dim; d += team.size) {
            float sum = 0.0f;
            for (uint32_t w = 0; w < n_split; ++w)
                if (states[w * stride + 1] > 0.0f) sum += expf(states[w * stride] - m) * states[w * stride + 2 + d];
            o[d] = sum;
        }
        if (team.rank == 0) {
            float l = 0.0f;
            for (uint32_t w = 0; w < n_split; ++w)
                if (states[w * stride + 1] > 0.0f) l += expf(states[w * stride] - m) * states[w * stride + 1];
            float* ml = ctx.f32(a.ml_off) + slot * 2;
            ml[0] = m;
            ml[1] = l;
        }
    }
};

}  // namespace mk

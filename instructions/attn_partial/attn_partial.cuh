// attn_partial on the device. Streaming path (head_dim 64 or 128, the group's output dims per lane
// within kMaxGroupDims): every K/V row is read once for all query heads of the group. A warp takes 32
// positions at a time, one lane per position: the lane dots its K row with every head's q (q staged in
// scratch, read as broadcasts), then the warp updates each head's online softmax (block max and sum by
// shuffles) and accumulates the V rows, lane d holding dims d, d + 32, ... of every head. The 32 rows of a
// block are independent loads, so many are in flight per warp. Other shapes take the per-head path (warps
// split positions, a position per warp per trip). Either way the warps' (m, l, o) meet in scratch and are
// merged in warp order (deterministic, no atomics); scores are never stored, so any context length fits.
// The cache holds fp32 or bf16 (ModelDims::kv_type): both paths are instantiated for each element type.
#pragma once
#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/common/device_math.cuh"

namespace mk {

struct AttnPartialDevice {
    static constexpr uint32_t kMaxHeadDim = 256;
    static constexpr uint32_t kDimsPerLane = kMaxHeadDim / 32;
    static constexpr uint32_t kMaxGroupDims = 16;  // registers for o: group x head_dim / 32 per lane
    static constexpr uint32_t kMaxGroup = 8;
    static constexpr uint32_t kRowsInFlight = 8;   // V rows a warp loads before using them

    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<AttnPartialArgs>(ins);
        int32_t begin = 0, end = 0;
        attn_chunk(ctx.pos, a.part, a.n_parts, begin, end);
        const uint32_t stride = a.head_dim + 2;  // one head's state in scratch: {m, l, o[hd]}
        const uint32_t room = ctx.scratch_floats > a.group * a.head_dim ? ctx.scratch_floats - a.group * a.head_dim : 0;
        const uint32_t n_split = min(team.n_warps(), room / (a.group * stride));
        if (ctx.dims.kv_type == uint32_t(KvType::bf16))
            return run_typed<uint16_t>(a, ctx, team, begin, end, n_split);
        run_typed<float>(a, ctx, team, begin, end, n_split);
    }

    // KvT: the cache's element, float or uint16_t (bf16 bits).
    template <typename KvT>
    static __device__ void run_typed(const AttnPartialArgs& a, const DeviceOpContext& ctx, const Team& team,
                                     int32_t begin, int32_t end, uint32_t n_split) {
        const bool streaming = n_split > 0 && a.group <= kMaxGroup;
        if (streaming && a.head_dim == 64 && a.group <= kMaxGroupDims / 2)
            return run_streaming<2, KvT>(a, ctx, team, begin, end, n_split);
        if (streaming && a.head_dim == 128 && a.group <= kMaxGroupDims / 4)
            return run_streaming<4, KvT>(a, ctx, team, begin, end, n_split);
        run_per_head<KvT>(a, ctx, team, begin, end);
    }

    // The loader's L2 prefetch of the chunk's K and V rows (the step's 2.5 GB of weights evict them from the
    // 50 MB L2 between steps, so without it every dependent load round of a trip is a DRAM miss). The row of
    // this step's position may still be in flight from rms_qkv: a stale line in L2 is only a hint.
    static __device__ void prefetch(const Instruction& ins, const DeviceOpContext& ctx) {
        const auto a = decode_args<AttnPartialArgs>(ins);
        int32_t begin = 0, end = 0;
        attn_chunk(ctx.pos, a.part, a.n_parts, begin, end);
        if (end <= begin) return;
        const uint64_t first = ctx.cache_offset(a.layer, a.kv_head) + uint64_t(begin) * a.head_dim;
        // Bulk prefetches take 16-byte-aligned ranges: the range shrinks to them (a head_dim not a multiple of 4
        // leaves its edge rows to DRAM as before).
        const uint64_t element = ctx.dims.kv_bytes();  // the cache's type: 4 (f32) or 2 (bf16)
        const uint64_t lo = (first * element + 15) / 16 * 16;
        const uint64_t hi = (first + uint64_t(end - begin) * a.head_dim) * element / 16 * 16;
        constexpr uint64_t kPiece = 16384;  // one bulk prefetch per 16 KiB, like a weight tile
        const auto* k = reinterpret_cast<const uint8_t*>(ctx.k_cache);
        const auto* v = reinterpret_cast<const uint8_t*>(ctx.v_cache);
        for (uint64_t off = lo; off < hi; off += kPiece) {
            const uint32_t n = uint32_t(hi - off < kPiece ? hi - off : kPiece);
            ptx::prefetch_l2(k + off, n);
            ptx::prefetch_l2(v + off, n);
        }
    }

    // kDims = head_dim / 32: output dims per lane per head.
    template <uint32_t kDims, typename KvT>
    static __device__ void run_streaming(const AttnPartialArgs& a, const DeviceOpContext& ctx, const Team& team,
                                         int32_t begin, int32_t end, uint32_t n_split) {
        constexpr uint32_t hd = 32 * kDims;
        constexpr uint32_t kGroups = kMaxGroupDims / kDims < kMaxGroup ? kMaxGroupDims / kDims : kMaxGroup;
        const uint32_t lane = team.lane(), warp = team.warp(), group = a.group;
        const uint32_t stride = hd + 2;
        const KvT* keys = static_cast<const KvT*>(ctx.k_cache) + ctx.cache_offset(a.layer, a.kv_head);    // (ctx_len, hd)
        const KvT* values = static_cast<const KvT*>(ctx.v_cache) + ctx.cache_offset(a.layer, a.kv_head);  // (ctx_len, hd)
        const float scale = 1.0f / sqrtf(float(hd));
        float* q = ctx.scratch;                           // (group, hd) fp32, pre-scaled (16-byte aligned)
        float* states = ctx.scratch + group * hd;         // (n_split, group) x {m, l, o[hd]}
        const float* q_in = ctx.f32(a.q_off) + uint64_t(a.kv_head) * group * hd;
        for (uint32_t i = team.rank; i < group * hd; i += team.size) q[i] = q_in[i] * scale;
        team.sync();

        if (warp < n_split) {
            float m[kGroups], l[kGroups], o[kGroups][kDims];
#pragma unroll
            for (uint32_t g = 0; g < kGroups; ++g) {
                m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
                for (uint32_t k = 0; k < kDims; ++k) o[g][k] = 0.0f;
            }
            for (int32_t base = begin + 32 * int32_t(warp); base < end; base += 32 * int32_t(n_split)) {
                const int32_t t = base + int32_t(lane);
                const uint32_t n_valid = uint32_t(min(32, end - base));
                // This lane's scores: its K row against every head's q.
                float s[kGroups];
#pragma unroll
                for (uint32_t g = 0; g < kGroups; ++g) s[g] = 0.0f;
                if (t < end) {
                    const KvT* k = keys + uint64_t(t) * hd;
#pragma unroll 4
                    for (uint32_t d = 0; d < hd; d += 4) {
                        const float4 kv = dev::kv_load4(k + d);
#pragma unroll
                        for (uint32_t g = 0; g < kGroups; ++g)
                            if (g < group) s[g] += dev::dot4(kv, dev::load_f4(q + g * hd + d));
                    }
                }
#pragma unroll
                for (uint32_t g = 0; g < kGroups; ++g) {
                    if (g >= group) break;
                    const float score = t < end ? s[g] : -INFINITY;
                    const float m_new = fmaxf(m[g], dev::warp_max(score));  // finite: lane 0 is valid
                    const float correction = expf(m[g] - m_new);
                    s[g] = t < end ? expf(score - m_new) : 0.0f;  // this lane's p
                    l[g] = l[g] * correction + dev::warp_sum(s[g]);
#pragma unroll
                    for (uint32_t k = 0; k < kDims; ++k) o[g][k] *= correction;
                    m[g] = m_new;
                }
                // V rows of the block, kRowsInFlight at a time, lane d its dims; p of position j is lane j's.
                for (uint32_t j0 = 0; j0 < n_valid; j0 += kRowsInFlight) {
                    float vr[kRowsInFlight][kDims];
#pragma unroll
                    for (uint32_t j = 0; j < kRowsInFlight; ++j) {
                        const KvT* v = values + uint64_t(base + int32_t(j0 + j)) * hd;
#pragma unroll
                        for (uint32_t k = 0; k < kDims; ++k)
                            vr[j][k] = j0 + j < n_valid ? dev::kv_load(v, lane + 32 * k) : 0.0f;
                    }
#pragma unroll
                    for (uint32_t j = 0; j < kRowsInFlight; ++j)
#pragma unroll
                        for (uint32_t g = 0; g < kGroups; ++g) {
                            if (g >= group) break;
                            const float p = __shfl_sync(0xffffffffu, s[g], j0 + j);
#pragma unroll
                            for (uint32_t k = 0; k < kDims; ++k) o[g][k] += p * vr[j][k];
                        }
                }
            }
#pragma unroll
            for (uint32_t g = 0; g < kGroups; ++g) {
                if (g >= group) break;
                float* state = states + (warp * group + g) * stride;
                if (lane == 0) state[0] = m[g], state[1] = l[g];
#pragma unroll
                for (uint32_t k = 0; k < kDims; ++k) state[2 + lane + 32 * k] = o[g][k];
            }
        }
        team.sync();
        for (uint32_t g = 0; g < group; ++g)
            merge(ctx, team, a, a.kv_head * group + g, n_split, states + g * stride, group * stride);
        team.sync();  // the scratch is free when run returns
    }

    // Any head_dim up to kMaxHeadDim: for each query head of the group, the warps split the chunk's positions
    // (warp w takes begin + w, begin + w + n, ...), each running an online softmax with its lanes holding q and
    // the output accumulator for dims lane, lane + 32, ...
    template <typename KvT>
    static __device__ void run_per_head(const AttnPartialArgs& a, const DeviceOpContext& ctx, const Team& team,
                                        int32_t begin, int32_t end) {
        const uint32_t hd = a.head_dim, lane = team.lane(), warp = team.warp();
        const KvT* keys = static_cast<const KvT*>(ctx.k_cache) + ctx.cache_offset(a.layer, a.kv_head);    // (ctx_len, hd)
        const KvT* values = static_cast<const KvT*>(ctx.v_cache) + ctx.cache_offset(a.layer, a.kv_head);  // (ctx_len, hd)
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
                    const KvT* k = keys + uint64_t(t) * hd;
                    const KvT* v = values + uint64_t(t) * hd;
                    float s = 0.0f;
#pragma unroll
                    for (uint32_t j = 0; j < kDimsPerLane; ++j)
                        if (lane + 32 * j < hd) s += qr[j] * dev::kv_load(k, lane + 32 * j);
                    s = dev::warp_sum(s) * scale;
                    const float m_new = fmaxf(m, s);
                    const float correction = expf(m - m_new), p = expf(s - m_new);
                    l = l * correction + p;
#pragma unroll
                    for (uint32_t j = 0; j < kDimsPerLane; ++j)
                        if (lane + 32 * j < hd) o[j] = o[j] * correction + p * dev::kv_load(v, lane + 32 * j);
                    m = m_new;
                }
                float* state = ctx.scratch + warp * stride;
                if (lane == 0) state[0] = m, state[1] = l;
#pragma unroll
                for (uint32_t j = 0; j < kDimsPerLane; ++j)
                    if (lane + 32 * j < hd) state[2 + lane + 32 * j] = o[j];
            }
            team.sync();
            merge(ctx, team, a, h, n_split, ctx.scratch, stride);
            team.sync();  // the scratch is free for the next head
        }
    }

    // Head h's states, warp w's at states[w * warp_stride]: every thread finds the common max in warp order;
    // thread r writes dims r, r + size, ... Warps without positions (l = 0) are skipped, so an empty chunk
    // writes m = -inf, l = 0, o = 0.
    static __device__ void merge(const DeviceOpContext& ctx, const Team& team, const AttnPartialArgs& a, uint32_t h,
                                 uint32_t n_split, const float* states, uint32_t warp_stride) {
        float m = -INFINITY;
        for (uint32_t w = 0; w < n_split; ++w)
            if (states[w * warp_stride + 1] > 0.0f) m = fmaxf(m, states[w * warp_stride]);
        const uint64_t slot = uint64_t(h) * a.n_parts + a.part;
        float* o = ctx.f32(a.o_off) + slot * a.head_dim;
        for (uint32_t d = team.rank; d < a.head_dim; d += team.size) {
            float sum = 0.0f;
            for (uint32_t w = 0; w < n_split; ++w)
                if (states[w * warp_stride + 1] > 0.0f)
                    sum += expf(states[w * warp_stride] - m) * states[w * warp_stride + 2 + d];
            o[d] = sum;
        }
        if (team.rank == 0) {
            float l = 0.0f;
            for (uint32_t w = 0; w < n_split; ++w)
                if (states[w * warp_stride + 1] > 0.0f) l += expf(states[w * warp_stride] - m) * states[w * warp_stride + 1];
            float* ml = ctx.f32(a.ml_off) + slot * 2;
            ml[0] = m;
            ml[1] = l;
        }
    }
};

}  // namespace mk

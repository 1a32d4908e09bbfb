// attn_rows on the device. Heads of a multiple of 16 up to 64 dims take tensor cores (attn_rows_mma.cuh); for the
// others, this file's CUDA-core path: the team walks the visible positions in blocks of up to 32, staging each
// block's K and V rows in shared memory once, and every warp's 4 (query, head) slots read them there (attn_rows.hpp's
// attn_rows_stage). Before, each query and head read its own K and V rows from global memory, a lane per position
// loading its K row 4 bytes at a time (32 cache lines a load) through an L1 of ~28 KiB beside 13 pages: ~128 KiB a
// (query, head) at 256 positions, 34 GB for a 512-token chunk of the Llama-3.2-1B shape.
//
// A query block's (query, head) pairs, query-major, go 4 to a warp; a round is one load of every warp (n_warps x 4
// pairs of consecutive queries, whose visible ranges differ by a few positions), walking positions 0 .. its last
// query's. Per block: lane t dots position t's staged K row with each slot's q (16-byte broadcasts from L1), the
// warp updates each slot's online softmax (max and sum by shuffles), then accumulates the block's V rows, lane d
// holding dims d, d + 32, ... of every slot. Scores are never stored, so any context length fits; a head wider than
// a pass's dims (32 a lane's accumulators) takes passes over them, each recomputing the scores.
#pragma once
#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/attn_rows/attn_rows_mma.cuh"

namespace mk {

struct AttnRowsDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<AttnRowsArgs>(ins);
        const AttnMmaStage st =
            attn_rows_mma_stage(a.head_dim, ctx.dims.kv_type == uint32_t(KvType::bf16), ctx.scratch_floats);
        if (st.used) return AttnRowsMma::run(a, ctx, team, st);
        const uint32_t lane_dims = attn_rows_lane_dims(a.head_dim);
        if (lane_dims == 2) return run_dims<2>(a, ctx, team);
        if (lane_dims == 4) return run_dims<4>(a, ctx, team);
        run_dims<8>(a, ctx, team);
    }

    // Rows [first, first + rows) of one KV head's cache, columns [d0, d0 + dims), into stage[t * pitch + d], a warp
    // a row (coalesced); a bf16 cache is widened here, so the dots read fp32 either way. A lane loads its columns of
    // kRows rows before storing any (the stores may alias the loads as far as the compiler knows, so a load after a
    // store waits for it): one round trip for every kRows of the warp's rows and 32 x kDims columns.
    template <uint32_t kDims>
    static __device__ void stage_rows(const DeviceOpContext& ctx, const void* cache, uint64_t head_off, uint32_t first,
                                      uint32_t rows, uint32_t head_dim, uint32_t d0, uint32_t dims, float* stage,
                                      uint32_t pitch, const Team& team) {
        constexpr uint32_t kRows = attn_rows_stage_rows(kDims);
        const bool bf16 = ctx.dims.kv_type == uint32_t(KvType::bf16);
        const uint32_t n_warps = team.n_warps(), lane = team.lane();
        for (uint32_t t0 = team.warp(); t0 < rows; t0 += kRows * n_warps)
            for (uint32_t c0 = 0; c0 < dims; c0 += 32 * kDims) {
                float x[kRows][kDims];
#pragma unroll
                for (uint32_t r = 0; r < kRows; ++r)
#pragma unroll
                    for (uint32_t k = 0; k < kDims; ++k) {
                        const uint32_t t = t0 + r * n_warps, d = c0 + lane + 32 * k;
                        const uint64_t at = head_off + uint64_t(first + t) * head_dim + d0 + d;
                        x[r][k] = t >= rows || d >= dims ? 0.0f
                                  : bf16               ? dev::kv_load(static_cast<const uint16_t*>(cache), at)
                                                       : dev::kv_load(static_cast<const float*>(cache), at);
                    }
#pragma unroll
                for (uint32_t r = 0; r < kRows; ++r)
#pragma unroll
                    for (uint32_t k = 0; k < kDims; ++k) {
                        const uint32_t t = t0 + r * n_warps, d = c0 + lane + 32 * k;
                        if (t < rows && d < dims) stage[t * pitch + d] = x[r][k];
                    }
            }
    }

    template <uint32_t kDims>
    static __device__ void run_dims(const AttnRowsArgs& a, const DeviceOpContext& ctx, const Team& team) {
        const uint32_t n = dev::step_tokens(ctx, a.n_tok), hd = a.head_dim, q_dim = ctx.dims.q_dim();
        const uint32_t lane = team.lane(), n_warps = team.n_warps();
        const uint32_t per_round = n_warps * kAttnRowsSlots;
        const uint64_t head_off = ctx.cache_offset(a.layer, a.kv_head);
        const float scale = 1.0f / sqrtf(float(hd));
        float* stage = ctx.scratch;  // the whole scratch: this op keeps nothing else there
        // q as 16-byte broadcasts where every head's row starts 16-byte aligned, else one float at a time.
        const bool q_vec = hd % 4 == 0 && a.q_off % 16 == 0;
        for (uint32_t d0 = 0; d0 < hd; d0 += 32 * kDims) {
            const uint32_t dims = min(32 * kDims, hd - d0);
            const AttnRowsStage st = attn_rows_stage(hd, dims, ctx.scratch_floats);
            for (uint32_t b = 0; b < kAttnQueryBlocks; ++b) {
                const QueryBlock block = attn_query_block(a, b);
                const uint32_t q_end = min(block.begin + block.count, n);
                const uint32_t pairs = q_end > block.begin ? (q_end - block.begin) * a.group : 0;
                const uint32_t rounds = (pairs + per_round - 1) / per_round;
                for (uint32_t r = 0; r < rounds; ++r) {
                    // This warp's slots: pairs p0 .. p0 + 3 (query block.begin + pair / group, head pair % group
                    // of the KV head's group); the round's positions run to its last pair's query.
                    const uint32_t p0 = (r * n_warps + team.warp()) * kAttnRowsSlots;
                    const uint32_t last = min(pairs, (r + 1) * per_round) - 1;
                    const int32_t span = ctx.pos + int32_t(block.begin + last / a.group) + 1;
                    const float* q[kAttnRowsSlots];
                    int32_t visible[kAttnRowsSlots];
                    int32_t warp_visible = 0;
#pragma unroll
                    for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                        const uint32_t pair = min(p0 + s, pairs - 1);  // past the pairs: the last's, unwritten
                        const uint32_t j = block.begin + pair / a.group, h = a.kv_head * a.group + pair % a.group;
                        q[s] = ctx.f32(a.q_off) + uint64_t(j) * q_dim + uint64_t(h) * hd;
                        visible[s] = p0 + s < pairs ? ctx.pos + int32_t(j) + 1 : 0;
                        warp_visible = max(warp_visible, visible[s]);
                    }
                    float m[kAttnRowsSlots], l[kAttnRowsSlots], o[kAttnRowsSlots][kDims];
#pragma unroll
                    for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                        m[s] = -INFINITY, l[s] = 0.0f;
#pragma unroll
                        for (uint32_t k = 0; k < kDims; ++k) o[s][k] = 0.0f;
                    }
                    for (int32_t base = 0; base < span; base += int32_t(st.positions)) {
                        const uint32_t rows = min(st.positions, uint32_t(span - base));
                        team.sync();  // no warp still reads the last block
                        stage_rows<kDims>(ctx, ctx.k_cache, head_off, uint32_t(base), rows, hd, 0, hd, stage,
                                          st.k_pitch, team);
                        if (st.joint)
                            stage_rows<kDims>(ctx, ctx.v_cache, head_off, uint32_t(base), rows, hd, d0, dims,
                                              stage + st.v_off, dims, team);
                        team.sync();
                        attn_rows_prefetch_block(ctx, head_off, base + int32_t(st.positions), span, st.positions, hd,
                                                 team);
                        const bool busy = base < warp_visible;  // the same for the whole warp
                        float p[kAttnRowsSlots];
                        if (busy) {
                            float dot[kAttnRowsSlots] = {};
                            // Lanes past the block's rows read its last (masked below): rows past it were not staged
                            // this block, or lie outside the scratch where fewer than 32 fit.
                            const float* key = stage + min(lane, rows - 1) * st.k_pitch;
                            if (q_vec) {
                                // Unrolled further, ptxas keeps more q loads in flight than the interpreter's
                                // registers hold.
#pragma unroll 2
                                for (uint32_t d = 0; d < hd; d += 4) {
                                    const float k0 = key[d], k1 = key[d + 1], k2 = key[d + 2], k3 = key[d + 3];
#pragma unroll
                                    for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                                        const float4 x = dev::load_f4(q[s] + d);
                                        dot[s] += x.x * k0, dot[s] += x.y * k1, dot[s] += x.z * k2, dot[s] += x.w * k3;
                                    }
                                }
                            } else {
#pragma unroll 4
                                for (uint32_t d = 0; d < hd; ++d) {
                                    const float k = key[d];
#pragma unroll
                                    for (uint32_t s = 0; s < kAttnRowsSlots; ++s) dot[s] += q[s][d] * k;
                                }
                            }
#pragma unroll
                            for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                                // Positions past a slot's query (or past the block) are masked; a slot with none yet
                                // (a missing pair) keeps m at -inf and weights at 0.
                                const bool valid = lane < rows && base + int32_t(lane) < visible[s];
                                const float score = valid ? dot[s] * scale : -INFINITY;
                                const float m_new = fmaxf(m[s], dev::warp_max(score));
                                const float shift = m_new == -INFINITY ? 0.0f : m_new;
                                const float correction = expf(m[s] - shift);
                                p[s] = valid ? expf(score - shift) : 0.0f;
                                l[s] = l[s] * correction + dev::warp_sum(p[s]);
                                m[s] = m_new;
#pragma unroll
                                for (uint32_t k = 0; k < kDims; ++k) o[s][k] *= correction;
                            }
                        }
                        const float* v_rows = stage + st.v_off;
                        if (!st.joint) {  // V in the same floats, once every warp is done with K
                            team.sync();
                            stage_rows<kDims>(ctx, ctx.v_cache, head_off, uint32_t(base), rows, hd, d0, dims,
                                              stage, dims, team);
                            team.sync();
                        }
                        if (busy) {
                            const uint32_t keys = min(rows, uint32_t(warp_visible - base));
                            for (uint32_t i = 0; i < keys; ++i) {
                                float v[kDims];
#pragma unroll
                                for (uint32_t k = 0; k < kDims; ++k)
                                    v[k] = lane + 32 * k < dims ? v_rows[i * dims + lane + 32 * k] : 0.0f;
#pragma unroll
                                for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                                    const float w = __shfl_sync(0xffffffffu, p[s], i);
#pragma unroll
                                    for (uint32_t k = 0; k < kDims; ++k) o[s][k] += w * v[k];
                                }
                            }
                        }
                    }
#pragma unroll
                    for (uint32_t s = 0; s < kAttnRowsSlots; ++s) {
                        if (p0 + s >= pairs) continue;
                        const uint32_t pair = p0 + s, j = block.begin + pair / a.group;
                        const uint32_t h = a.kv_head * a.group + pair % a.group;
                        float* out = ctx.f32(a.out_off) + uint64_t(j) * q_dim + uint64_t(h) * hd + d0;
#pragma unroll
                        for (uint32_t k = 0; k < kDims; ++k)
                            if (lane + 32 * k < dims) out[lane + 32 * k] = o[s][k] / l[s];
                    }
                }
            }
        }
    }
};

}  // namespace mk

// attn_rows on tensor cores, for head_dim a multiple of 16 up to 64 (attn_rows.hpp's attn_rows_mma_stage). A warp
// carries a tile of 16 (query, head) pairs; a round is one tile a warp. Per staged block of 16 positions:
// S = Q K^T (16 pairs x 8 positions an MMA, head_dim / 16 k-steps), the online softmax on S's fragments (a pair's row
// lies in 4 lanes: two shuffles), then O += P V (16 pairs x 8 dims an MMA, 16 positions a k-step), P taken straight
// from S's fragments, whose layout is the A operand's (mk_emu/mma.hpp). Operands go in as bf16 halves, so the dots
// keep fp32's precision to ~2^-17: q = q_hi + q_lo (two MMAs a k-step), an fp32 cache's K and V split the same way
// by the staging (a third MMA, k_lo q_hi; the lo x lo product, within 2^-16 of it, is left out), P = p_hi + p_lo.
// On CUDA cores (attn_rows.cuh's other path) a lane issued ~11 instructions a key and dim pair; here an MMA does
// 2,048 multiply-adds.
#pragma once
#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/common/rows_math.cuh"

namespace mk {

// The next block's K and V rows (contiguous in the cache) into L1 while this one is computed, a line a thread, where
// both fit beside the kernel's other L1 use (attn_rows_prefetched): the block's staging then hits L1 instead of
// waiting round trips to L2.
__device__ inline void attn_rows_prefetch_block(const DeviceOpContext& ctx, uint64_t head_off, int32_t next,
                                                int32_t span, uint32_t positions, uint32_t head_dim, const Team& team) {
    if (next >= span) return;
    const uint32_t element = ctx.dims.kv_bytes();
    const uint32_t rows = min(positions, uint32_t(span - next));
    if (!attn_rows_prefetched(rows, head_dim, element)) return;
    const uint64_t first = (head_off + uint64_t(next) * head_dim) * element;
    const uint64_t bytes = uint64_t(rows) * head_dim * element;
    const uint8_t* caches[2] = {static_cast<const uint8_t*>(ctx.k_cache), static_cast<const uint8_t*>(ctx.v_cache)};
    for (const uint8_t* cache : caches) {
        // Every 128-byte line the range touches, each by an address inside the range.
        const uintptr_t begin = reinterpret_cast<uintptr_t>(cache + first), end = begin + bytes;
        for (uintptr_t line = (begin & ~uintptr_t(127)) + 128 * team.rank; line < end; line += 128 * team.size)
            ptx::prefetch_l1(reinterpret_cast<const void*>(line < begin ? begin : line));
    }
}

struct AttnRowsMma {
    // Staging: a warp takes positions (K) or position pairs (V), lane l the words (K) or dims (V) l, l + 32, ...:
    // the loads run along the cache's rows. A lane loads kStageItems before it stores any (the stores may alias the
    // loads as far as the compiler knows, so a load after a store waits for it): a block's K, then its V, in one
    // round trip each (16 rows over 7 warps). More items a batch, or a division per item, and the interpreter kernel
    // spilled.
    static constexpr uint32_t kStageItems = 4;

    // Rows [first, first + rows) of one KV head's K as bf16 pairs along the dims, the block's later rows zeros: a
    // warp a row, lane l its word l (a row holds at most kAttnMmaMaxHeadDim / 2 = 32).
    static __device__ void stage_k(const DeviceOpContext& ctx, uint64_t head_off, uint32_t first, uint32_t rows,
                                   uint32_t hd, const AttnMmaStage& st, uint32_t* words, const Team& team) {
        static_assert(kAttnMmaMaxHeadDim / 2 <= 32);
        const uint32_t n_warps = team.n_warps();
        const uint32_t rank = ptx::opaque(team.rank), w = rank % 32;  // not hoisted: see run
        if (w >= hd / 2) return;  // no barrier below: lanes past the row leave
        for (uint32_t t0 = rank / 32; t0 < kAttnMmaBlockPositions; t0 += kStageItems * n_warps) {
            uint32_t hi[kStageItems], lo[kStageItems];
#pragma unroll
            for (uint32_t r = 0; r < kStageItems; ++r) {
                const uint32_t t = t0 + r * n_warps;
                hi[r] = lo[r] = 0;
                if (t >= rows) continue;
                const uint64_t at = head_off + uint64_t(first + t) * hd + 2 * w;  // even: 4- or 8-byte aligned
                if (st.halves == 1) {
                    hi[r] = *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(ctx.k_cache) + at);
                } else {
                    const float2 x = *reinterpret_cast<const float2*>(static_cast<const float*>(ctx.k_cache) + at);
                    dev::split_bf16_pair(x.x, x.y, hi[r], lo[r]);
                }
            }
#pragma unroll
            for (uint32_t r = 0; r < kStageItems; ++r) {
                const uint32_t t = t0 + r * n_warps;
                if (t >= kAttnMmaBlockPositions) continue;
                words[t * kAttnMmaKPitch + w] = hi[r];
                if (st.halves == 2) words[st.k_lo + t * kAttnMmaKPitch + w] = lo[r];
            }
        }
    }

    // The same rows of V transposed, as bf16 pairs along the positions, in groups of 32 items, a warp a group: lane
    // l takes position pair 4 ub + l % 4 and dim 8 db + l / 4 of group (ub, db), so the warp's stores (word 12 d + u)
    // fall in 32 banks (a lane a dim put 4 lanes on each) and its loads read 32-byte pieces of 8 rows.
    static __device__ void stage_v(const DeviceOpContext& ctx, uint64_t head_off, uint32_t first, uint32_t rows,
                                   uint32_t hd, const AttnMmaStage& st, uint32_t* words, const Team& team) {
        constexpr uint32_t kPairGroups = kAttnMmaBlockPositions / 2 / 4;
        const uint32_t groups = kPairGroups * (hd / 8), n_warps = team.n_warps();
        const uint32_t rank = ptx::opaque(team.rank), lane = rank % 32;
        for (uint32_t g0 = rank / 32; g0 < groups; g0 += kStageItems * n_warps) {
            uint32_t hi[kStageItems], lo[kStageItems];
#pragma unroll
            for (uint32_t i = 0; i < kStageItems; ++i) {
                const uint32_t group = g0 + i * n_warps;
                const uint32_t t = 2 * (4 * (group % kPairGroups) + lane % 4), d = 8 * (group / kPairGroups) + lane / 4;
                hi[i] = lo[i] = 0;
                if (group >= groups || t >= rows) continue;
                const uint64_t at = head_off + uint64_t(first + t) * hd + d;
                const bool second = t + 1 < rows;
                if (st.halves == 1) {
                    const uint16_t* v = static_cast<const uint16_t*>(ctx.v_cache) + at;
                    hi[i] = uint32_t(v[0]) | (second ? uint32_t(v[hd]) << 16 : 0u);
                } else {
                    const float* v = static_cast<const float*>(ctx.v_cache) + at;
                    dev::split_bf16_pair(v[0], second ? v[hd] : 0.0f, hi[i], lo[i]);
                }
            }
#pragma unroll
            for (uint32_t i = 0; i < kStageItems; ++i) {
                const uint32_t group = g0 + i * n_warps;
                if (group >= groups) continue;
                const uint32_t u = 4 * (group % kPairGroups) + lane % 4, d = 8 * (group / kPairGroups) + lane / 4;
                words[st.v_off + d * kAttnMmaVPitch + u] = hi[i];
                if (st.halves == 2) words[st.v_lo + d * kAttnMmaVPitch + u] = lo[i];
            }
        }
    }

    static __device__ void run(const AttnRowsArgs& a, const DeviceOpContext& ctx, const Team& team,
                               const AttnMmaStage& st) {
        // The k-steps (16 dims each) a tile's q fragments hold (a narrower head skips the rest), O's 8-dim tiles,
        // S's 8-position tiles.
        constexpr uint32_t kSteps = kAttnMmaMaxHeadDim / 16, kDimTiles = 2 * kSteps;
        constexpr uint32_t kPosTiles = kAttnMmaBlockPositions / 8;
        const uint32_t n = dev::step_tokens(ctx, a.n_tok), hd = a.head_dim, q_dim = ctx.dims.q_dim();
        // The thread's values are derived here, not hoisted into the interpreter's loop (they held ~19 registers
        // there, through every op).
        const uint32_t rank = ptx::opaque(team.rank), lane = rank % 32, warp = rank / 32, g = lane / 4, t = lane % 4;
        const uint32_t n_warps = team.n_warps();
        const uint32_t per_round = n_warps * kAttnMmaTile, steps = hd / 16;
        const bool kv_lo = st.halves == 2;
        const uint64_t head_off = ctx.cache_offset(a.layer, a.kv_head);
        const float scale = 1.0f / sqrtf(float(hd));
        uint32_t* const words = reinterpret_cast<uint32_t*>(ctx.scratch);  // this op keeps nothing else there
        // This lane's fragment words: K rows g (+ 8 nt) at word t (+ 8 ks), V^T rows g (+ 8 dt) at word t (+ 8 kk).
        const uint32_t* const k_hi = words + g * kAttnMmaKPitch + t;
        const uint32_t* const k_lo = k_hi + st.k_lo;  // an fp32 cache's
        const uint32_t* const v_hi = words + st.v_off + g * kAttnMmaVPitch + t;
        const uint32_t* const v_lo = words + st.v_lo + g * kAttnMmaVPitch + t;
        const AttnMmaPairs list = attn_mma_pairs(a, n);
        const uint32_t pairs = list.count(), rounds = (pairs + per_round - 1) / per_round;
        for (uint32_t r = 0; r < rounds; ++r) {
            // This warp's tile: pairs p0 .. p0 + 15 of the list; this lane's rows are pairs p0 + g and p0 + g + 8.
            // The round's positions run to its latest query's, the warp's to its tile's.
            const uint32_t p0 = (r * n_warps + warp) * kAttnMmaTile;
            const uint32_t last = min(pairs, (r + 1) * per_round) - 1;
            const int32_t span = ctx.pos + int32_t(list.last_query(r * per_round, last)) + 1;
            const int32_t warp_visible =
                p0 < pairs ? ctx.pos + int32_t(list.last_query(p0, min(p0 + kAttnMmaTile - 1, last))) + 1 : 0;
            int32_t visible[2];
            uint32_t q_hi[kSteps][4], q_lo[kSteps][4];
            {
                const float* q[2];
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    const uint32_t pair = p0 + g + 8 * h, held = min(pair, pairs - 1);  // past the pairs: unwritten
                    const uint32_t j = list.query(held), head = a.kv_head * a.group + list.head(held);
                    q[h] = ctx.f32(a.q_off) + uint64_t(j) * q_dim + uint64_t(head) * hd;
                    visible[h] = pair < pairs ? ctx.pos + int32_t(j) + 1 : 0;
                }
                // A fragment of k-step ks: rows g (registers 0, 2) and g + 8 (1, 3), dims 16 ks + 2t (0, 1) and
                // + 8 (2, 3).
#pragma unroll
                for (uint32_t ks = 0; ks < kSteps; ++ks)
#pragma unroll
                    for (uint32_t i = 0; i < 4; ++i) {
                        q_hi[ks][i] = q_lo[ks][i] = 0;
                        const float* row = q[i % 2] + 16 * ks + 2 * t + 8 * (i / 2);
                        if (ks < steps) dev::split_bf16_pair(row[0], row[1], q_hi[ks][i], q_lo[ks][i]);
                    }
            }
            float o[kDimTiles][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
            for (int32_t base = 0; base < span; base += int32_t(kAttnMmaBlockPositions)) {
                const uint32_t rows = min(kAttnMmaBlockPositions, uint32_t(span - base));
                team.sync();  // no warp still reads the last block
                stage_k(ctx, head_off, uint32_t(base), rows, hd, st, words, team);
                stage_v(ctx, head_off, uint32_t(base), rows, hd, st, words, team);
                team.sync();
                attn_rows_prefetch_block(ctx, head_off, base + int32_t(kAttnMmaBlockPositions), span,
                                         kAttnMmaBlockPositions, hd, team);
                const bool busy = base < warp_visible;  // the same for the whole warp
                float s[kPosTiles][4] = {};
                if (busy) {
                    // S tile nt: positions base + 8 nt + g as B's columns, this lane's K words t and t + 4 of
                    // each k-step.
#pragma unroll
                    for (uint32_t nt = 0; nt < kPosTiles; ++nt) {
                        const uint32_t key = 8 * nt * kAttnMmaKPitch;
#pragma unroll
                        for (uint32_t ks = 0; ks < kSteps; ++ks) {
                            if (ks >= steps) continue;
                            const uint32_t k_high[2] = {k_hi[key + 8 * ks], k_hi[key + 8 * ks + 4]};
                            ptx::mma_m16n8k16_bf16(s[nt], q_hi[ks], k_high, s[nt]);
                            ptx::mma_m16n8k16_bf16(s[nt], q_lo[ks], k_high, s[nt]);
                            if (kv_lo) {
                                const uint32_t k_low[2] = {k_lo[key + 8 * ks], k_lo[key + 8 * ks + 4]};
                                ptx::mma_m16n8k16_bf16(s[nt], q_hi[ks], k_low, s[nt]);
                            }
                        }
                        __syncwarp();  // one tile's loads at a time: hoisted, they held the registers
                    }
                    // Lane element e of tile nt: row g + 8 (e / 2), position 8 nt + 2t + e % 2 of the block.
                    // Positions past a row's query (or the block) are masked; a row with none yet keeps m at
                    // -inf and its weights at 0.
                    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
                    for (uint32_t nt = 0; nt < kPosTiles; ++nt)
#pragma unroll
                        for (uint32_t e = 0; e < 4; ++e) {
                            const uint32_t at = 8 * nt + 2 * t + e % 2;
                            const bool valid = at < rows && base + int32_t(at) < visible[e / 2];
                            s[nt][e] = valid ? s[nt][e] * scale : -INFINITY;
                            row_max[e / 2] = fmaxf(row_max[e / 2], s[nt][e]);
                        }
                    float shift[2], correction[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {  // a row's 4 lanes: lane ^ 1, lane ^ 2
                        row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
                        row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
                        const float m_new = fmaxf(m[h], row_max[h]);
                        shift[h] = m_new == -INFINITY ? 0.0f : m_new;
                        correction[h] = expf(m[h] - shift[h]);
                        m[h] = m_new;
                    }
#pragma unroll
                    for (uint32_t nt = 0; nt < kPosTiles; ++nt)
#pragma unroll
                        for (uint32_t e = 0; e < 4; ++e) {
                            s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - shift[e / 2]);
                            row_sum[e / 2] += s[nt][e];
                        }
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) l[h] = l[h] * correction[h] + row_sum[h];  // this lane's part
#pragma unroll
                    for (uint32_t dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
                        for (uint32_t e = 0; e < 4; ++e)
                            if (dt < 2 * steps) o[dt][e] *= correction[e / 2];
                    __syncwarp();  // V's loads not hoisted into the softmax: they held 64 registers there
                    // k-step kk takes positions 16 kk .. 16 kk + 15: S tiles 2 kk and 2 kk + 1 are P's A fragment.
#pragma unroll
                    for (uint32_t kk = 0; kk < kPosTiles / 2; ++kk) {
                        uint32_t p_hi[4], p_lo[4];
#pragma unroll
                        for (uint32_t i = 0; i < 4; ++i) {
                            const float* p = s[2 * kk + i / 2] + 2 * (i % 2);
                            dev::split_bf16_pair(p[0], p[1], p_hi[i], p_lo[i]);
                        }
#pragma unroll
                        for (uint32_t dt = 0; dt < kDimTiles; ++dt) {
                            if (dt >= 2 * steps) continue;
                            const uint32_t at = 8 * dt * kAttnMmaVPitch + 8 * kk;
                            const uint32_t v[2] = {v_hi[at], v_hi[at + 4]};
                            ptx::mma_m16n8k16_bf16(o[dt], p_hi, v, o[dt]);
                            ptx::mma_m16n8k16_bf16(o[dt], p_lo, v, o[dt]);
                            if (kv_lo) {
                                const uint32_t v_low[2] = {v_lo[at], v_lo[at + 4]};
                                ptx::mma_m16n8k16_bf16(o[dt], p_hi, v_low, o[dt]);
                            }
                            __syncwarp();
                        }
                    }
                }
            }
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {  // the row's sum over its 4 lanes
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
                l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
            }
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t pair = p0 + g + 8 * h;
                if (pair >= pairs) continue;
                const uint32_t j = list.query(pair), head = a.kv_head * a.group + list.head(pair);
                float* out = ctx.f32(a.out_off) + uint64_t(j) * q_dim + uint64_t(head) * hd + 2 * t;
#pragma unroll
                for (uint32_t dt = 0; dt < kDimTiles; ++dt)
                    if (dt < 2 * steps)
                        out[8 * dt] = o[dt][2 * h] / l[h], out[8 * dt + 1] = o[dt][2 * h + 1] / l[h];
            }
        }
    }
};

}  // namespace mk

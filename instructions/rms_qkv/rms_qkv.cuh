// rms_qkv on the device: RMSNorm into scratch, a dot per row (one warp per row) written straight to
// its destination (the q buffer or the KV cache at pos), then one pass over rotary pairs for bias,
// QK-norm and RoPE, in place (finish).
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/rms_qkv/rms_qkv.hpp"

namespace mk {

struct RmsQkvDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
        const auto a = decode_args<RmsQkvArgs>(ins);
        const uint32_t hd = a.head_dim;
        const QkvKind kind = QkvKind(a.kind);
        float* xn = dev::vector_scratch(ctx);  // (d_model) fp32
        dev::rms_norm(ctx.f32(a.x_off), reinterpret_cast<const float*>(ctx.weights[a.norm].data), ctx.dims.norm_eps,
                      a.d_model, xn, team, dev::reduce_scratch(ctx));

        // Output i (row row_begin + i): element row % hd of head row / hd. A bf16 cache's K/V rows are
        // finished in fp32 in the scratch after xn (the host keeps such blocks within kMaxStagedKvRows) and
        // rounded once when stored, as the CPU does.
        const bool staged = kind != QkvKind::q && ctx.dims.kv_type == uint32_t(KvType::bf16);
        auto cache_index = [&](uint32_t i) {
            const uint32_t row = a.row_begin + i;
            return ctx.cache_offset(a.layer, row / hd) + uint64_t(ctx.pos) * hd + row % hd;
        };
        auto out = [&](uint32_t i) -> float* {
            if (kind == QkvKind::q) return ctx.f32(a.q_off) + a.row_begin + i;
            if (staged) return xn + a.d_model + i;
            return static_cast<float*>(kind == QkvKind::k ? ctx.k_cache : ctx.v_cache) + cache_index(i);
        };
        dev::for_each_row_dot(ctx, team, tiles, xn, a.d_model, [&](const DeviceTile&, uint32_t row, float dot) {
            if (team.lane() == 0) *out(row - a.row_begin) = dot;
        });
        team.sync();  // every dot is in place

        finish(ctx, team, kind, a.row_begin, a.n_rows, hd, a.bias, a.qk_norm, 1, ctx.pos,
               [&](uint32_t, uint32_t i) { return out(i); });
        if (!staged) return;
        team.sync();  // every staged row is finished
        uint16_t* cache = static_cast<uint16_t*>(kind == QkvKind::k ? ctx.k_cache : ctx.v_cache);
        for (uint32_t i = team.rank; i < a.n_rows; i += team.size) dev::kv_store(cache + cache_index(i), *out(i));
        team.sync();  // the scratch is free when run returns
    }

    // Bias, QK-norm and RoPE over a block's outputs for n tokens, in place: out(j, i) is token j's output i (row
    // row_begin + i), at position pos + j. Pairs never straddle heads, so with QK-norm one warp owns a (token, head)
    // (lane p its pairs p, p + 32, ...) and needs only a warp reduction. rms_qkv_rows shares it.
    template <class Out>
    static __device__ void finish(const DeviceOpContext& ctx, const Team& team, QkvKind kind, uint32_t row_begin,
                                  uint32_t n_rows, uint32_t hd, uint32_t bias_id, uint32_t norm_id, uint32_t n,
                                  int32_t pos, Out&& out) {
        auto vector = [&](uint32_t w) {
            return w != kNoWeight ? reinterpret_cast<const float*>(ctx.weights[w].data) : nullptr;
        };
        const float* bias = vector(bias_id);  // (rows of Q, K or V) f32, or none
        const float* norm = vector(norm_id);  // (head_dim) f32, or none
        const uint32_t n_pairs = (n_rows + 1) / 2;
        // Pair p of token j: bias, then RoPE unless V; `scale` is the head's QK-norm factor (w applied here).
        auto finish_pair = [&](uint32_t j, uint32_t p, float scale) {
            const uint32_t i = 2 * p;
            const bool has_b = i + 1 < n_rows;  // rows come in pairs; never read past an odd block
            float x0 = *out(j, i), x1 = has_b ? *out(j, i + 1) : 0.0f;
            if (bias) x0 += bias[row_begin + i], x1 += has_b ? bias[row_begin + i + 1] : 0.0f;
            if (norm) {
                const uint32_t e = (row_begin + i) % hd;
                x0 = norm[e] * (x0 * scale), x1 = norm[e + 1] * (x1 * scale);
            }
            if (kind != QkvKind::v)
                dev::rope_pair(x0, x1, pos + int32_t(j), ctx.rope_inv_freq[((row_begin + i) % hd) / 2]);
            *out(j, i) = x0;
            if (has_b) *out(j, i + 1) = x1;
        };
        if (!norm) {
            for (uint32_t u = team.rank; u < n * n_pairs; u += team.size) finish_pair(u / n_pairs, u % n_pairs, 1.0f);
            return;
        }
        // QK-norm: blocks hold whole heads (hd / 2 pairs each); the warp's sum of squares, then the pairs.
        const uint32_t n_heads = n_rows / hd;
        for (uint32_t u = team.warp(); u < n * n_heads; u += team.n_warps()) {
            const uint32_t j = u / n_heads, h = u % n_heads;
            float sum_sq = 0.0f;
            for (uint32_t i = h * hd + team.lane(); i < (h + 1) * hd; i += 32) {
                const float v = *out(j, i) + (bias ? bias[row_begin + i] : 0.0f);
                sum_sq += v * v;
            }
            sum_sq = dev::warp_sum(sum_sq);
            const float scale = float(1.0 / sqrt(double(sum_sq) / hd + ctx.dims.norm_eps));
            for (uint32_t p = h * hd / 2 + team.lane(); p < (h + 1) * hd / 2; p += 32) finish_pair(j, p, scale);
        }
    }
};

}  // namespace mk

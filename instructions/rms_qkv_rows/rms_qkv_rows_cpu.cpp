// rms_qkv_rows on the CPU: each block token's norm once, each staged weight row against all of them, then bias,
// QK-norm and RoPE per token.
#include "instructions/rms_qkv_rows/rms_qkv_rows.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"
#include "models/error.hpp"

namespace mk {

void RmsQkvRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsQkvRowsArgs>(ins);
    const ModelDims& dims = *ctx.dims;
    const TokenBlock run = run_token_block(a.tokens(), step_tokens(*ctx.step, a.n_tok));
    const uint32_t hd = a.head_dim, n = run.count();
    if (a.row_begin % 2 || a.n_rows % 2 || (a.qk_norm != kNoWeight && (a.row_begin % hd || a.n_rows % hd)))
        fail("rms_qkv_rows: rows [{}, {}) split a rotary pair or a normalized head", a.row_begin, a.row_begin + a.n_rows);
    thread_local std::vector<float> xn, out, rope_cs;  // (n, d_model) normed inputs; (n, n_rows) outputs; (hd) RoPE
    xn.resize(size_t(n) * a.d_model);
    out.resize(size_t(n) * a.n_rows);
    for (uint32_t j = 0; j < n; ++j)
        rms_norm(ctx.f32(a.x_off) + size_t(run.begin + j) * a.d_model, ctx.weights[a.norm], dims.norm_eps, a.d_model,
                 xn.data() + size_t(j) * a.d_model);

    ColumnDots dots(ctx, xn.data(), a.d_model, n);
    for_each_tile_row_dots(ctx, a.weight, dots, n, [&](uint32_t row, const float* dot) {
        for (uint32_t j = 0; j < n; ++j) out[size_t(j) * a.n_rows + (row - a.row_begin)] = dot[j];
    });
    const QkvKind kind = QkvKind(a.kind);
    for (uint32_t j = 0; j < n; ++j) {
        float* o = out.data() + size_t(j) * a.n_rows;
        const int32_t pos = ctx.step->pos + int32_t(run.begin + j);
        if (a.bias != kNoWeight) {
            const float* bias = reinterpret_cast<const float*>(ctx.weights[a.bias].data);
            for (uint32_t i = 0; i < a.n_rows; ++i) o[i] += bias[a.row_begin + i];
        }
        if (a.qk_norm != kNoWeight)
            for (uint32_t h = 0; h < a.n_rows / hd; ++h)
                rms_norm(o + size_t(h) * hd, ctx.weights[a.qk_norm], dims.norm_eps, hd, o + size_t(h) * hd);
        if (kind != QkvKind::v && a.n_rows >= hd) {
            // A pair's angle depends on its index within the head: each cos and sin once a token, not once a head
            // (sincos was 4.4% of SmolLM2's pp512 profile).
            rope_cs.resize(hd);
            for (uint32_t p = 0; p < hd / 2; ++p) rope_cos_sin(pos, ctx.rope_inv_freq[p], rope_cs[2 * p], rope_cs[2 * p + 1]);
            for (uint32_t i = 0; i < a.n_rows; i += 2) {
                const uint32_t p = ((a.row_begin + i) % hd) / 2;
                rope_rotate(o[i], o[i + 1], rope_cs[2 * p], rope_cs[2 * p + 1]);
            }
        } else if (kind != QkvKind::v) {
            for (uint32_t i = 0; i < a.n_rows; i += 2)
                rope_pair(o[i], o[i + 1], pos, ctx.rope_inv_freq[((a.row_begin + i) % hd) / 2]);
        }
        if (kind == QkvKind::q) {
            std::copy(o, o + a.n_rows, ctx.f32(a.q_off) + size_t(run.begin + j) * dims.q_dim() + a.row_begin);
            continue;
        }
        for (uint32_t i = 0; i < a.n_rows; ++i) {
            const uint32_t row = a.row_begin + i;
            ctx.store_kv(kind == QkvKind::k ? Space::k_cache : Space::v_cache, a.layer, row / hd, pos, row % hd, o[i]);
        }
    }
}

std::string RmsQkvRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsQkvRowsArgs>(ins);
    const TokenBlock tokens = a.tokens();
    return fmt::format("rms_qkv_rows L{} {} rows [{}, {}) tokens [{}, {}) T={}", a.layer, "qkv"[a.kind % 3],
                       a.row_begin, a.row_begin + a.n_rows, tokens.begin, tokens.end, a.n_tok);
}

}  // namespace mk

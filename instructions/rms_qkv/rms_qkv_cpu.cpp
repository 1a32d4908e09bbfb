// rms_qkv on the CPU: norm once, a dot per row from the staged tiles, then bias, QK-norm and RoPE.
#include "instructions/rms_qkv/rms_qkv.hpp"

#include <fmt/format.h>

#include <vector>

#include "instructions/common/cpu_math.hpp"
#include "models/error.hpp"

namespace mk {

void RmsQkvOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<RmsQkvArgs>(ins);
    const ModelDims& dims = *ctx.dims;
    const uint32_t hd = a.head_dim;
    if (a.row_begin % 2 || a.n_rows % 2 || (a.qk_norm != kNoWeight && (a.row_begin % hd || a.n_rows % hd)))
        fail("rms_qkv: rows [{}, {}) split a rotary pair or a normalized head", a.row_begin, a.row_begin + a.n_rows);
    thread_local std::vector<float> xn, out;
    xn.resize(a.d_model);
    out.resize(a.n_rows);
    rms_norm(ctx.f32(a.x_off), ctx.weights[a.norm], dims.norm_eps, a.d_model, xn.data());

    const DType dtype = ctx.weights[a.weight].dtype;
    RowDots dots(ctx, xn.data(), a.d_model);
    for_each_tile_row(ctx, a.weight, [&](uint32_t row, const uint8_t* bytes) {
        out[row - a.row_begin] = dots.dot(dtype, bytes);
    });
    if (a.bias != kNoWeight) {
        const float* bias = reinterpret_cast<const float*>(ctx.weights[a.bias].data);
        for (uint32_t i = 0; i < a.n_rows; ++i) out[i] += bias[a.row_begin + i];
    }
    if (a.qk_norm != kNoWeight)
        for (uint32_t h = 0; h < a.n_rows / hd; ++h)
            rms_norm(&out[size_t(h) * hd], ctx.weights[a.qk_norm], dims.norm_eps, hd, &out[size_t(h) * hd]);

    const QkvKind kind = QkvKind(a.kind);
    if (kind != QkvKind::v) {
        // Row r is element r % head_dim of its head; rows 2i and 2i+1 form rotary pair i.
        for (uint32_t i = 0; i < a.n_rows; i += 2) {
            const uint32_t pair = ((a.row_begin + i) % hd) / 2;
            rope_pair(out[i], out[i + 1], ctx.step->pos, ctx.rope_inv_freq[pair]);
        }
    }
    if (kind == QkvKind::q) {
        std::copy(out.begin(), out.end(), ctx.f32(a.q_off) + a.row_begin);
        return;
    }
    for (uint32_t i = 0; i < a.n_rows; ++i) {
        const uint32_t row = a.row_begin + i;
        ctx.store_kv(kind == QkvKind::k ? Space::k_cache : Space::v_cache, a.layer, row / hd, ctx.step->pos, row % hd,
                     out[i]);
    }
}

void RmsQkvOp::fail_staged_rows(const RmsQkvArgs& a) {
    fail("rms_qkv L{} {} rows [{}, {}): a bf16 KV cache's blocks hold at most {} rows", a.layer, "qkv"[a.kind % 3],
         a.row_begin, a.row_begin + a.n_rows, kMaxStagedKvRows);
}

std::string RmsQkvOp::describe(const Instruction& ins) {
    auto a = decode_args<RmsQkvArgs>(ins);
    return fmt::format("rms_qkv L{} {} rows [{}, {})", a.layer, "qkv"[a.kind % 3], a.row_begin,
                       a.row_begin + a.n_rows);
}

}  // namespace mk

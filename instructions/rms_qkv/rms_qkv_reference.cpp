// rms_qkv's float64 reference and cases: Q, K and V row blocks in every stored format, with and without
// Qwen2 biases and Qwen3 QK-norm; RoPE on Q and K; K and V appended to the cache at the step's position.
#include "instructions/rms_qkv/rms_qkv.hpp"

#include <fmt/format.h>

#include <cmath>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<double> RmsQkvOp::reference_rows(const OpBuffers& b, const RmsQkvArgs& a, const std::vector<double>& x,
                                             int32_t pos) {
    const uint32_t hd = a.head_dim;
    const std::vector<double> xn = ref_rms_norm(b, x, a.norm);
    std::vector<double> out(a.n_rows);
    for (uint32_t r = 0; r < a.n_rows; ++r) out[r] = ref_dot(ref_row(b, a.weight, a.row_begin + r), xn);
    if (a.bias != kNoWeight) {
        const std::vector<double> bias = ref_row(b, a.bias, 0);
        for (uint32_t r = 0; r < a.n_rows; ++r) out[r] += bias[a.row_begin + r];
    }
    if (a.qk_norm != kNoWeight)
        for (uint32_t h = 0; h < a.n_rows / hd; ++h) {
            const std::vector<double> head(out.begin() + h * hd, out.begin() + (h + 1) * hd);
            const std::vector<double> normed = ref_rms_norm(b, head, a.qk_norm);
            std::copy(normed.begin(), normed.end(), out.begin() + h * hd);
        }
    if (QkvKind(a.kind) != QkvKind::v)
        for (uint32_t r = 0; r < a.n_rows; r += 2) {  // adjacent pairs (2i, 2i + 1) of each head
            const double angle = double(pos) * b.rope_inv_freq[((a.row_begin + r) % hd) / 2];
            const double x0 = out[r], x1 = out[r + 1];
            out[r] = x0 * std::cos(angle) - x1 * std::sin(angle);
            out[r + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
    return out;
}

std::vector<Expected> RmsQkvOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsQkvArgs>(ins);
    const uint32_t hd = a.head_dim;
    std::vector<double> out = reference_rows(b, a, ref_f32(b, a.x_off, a.d_model), b.step.pos);
    const QkvKind kind = QkvKind(a.kind);
    if (kind == QkvKind::q) return {ref_arena("q", a.q_off + 4ull * a.row_begin, std::move(out))};
    std::vector<Expected> cache;  // one run per KV head the block touches
    for (uint32_t r = 0; r < a.n_rows;) {
        const uint32_t row = a.row_begin + r, n = std::min(a.n_rows - r, hd - row % hd);
        cache.push_back(ref_kv_store(b, fmt::format("{} cache head {}", kind == QkvKind::k ? "K" : "V", row / hd),
                                     kind == QkvKind::k ? Space::k_cache : Space::v_cache,
                                     b.cache_index(a.layer, row / hd, b.step.pos) + row % hd,
                                     std::vector<double>(out.begin() + r, out.begin() + r + n)));
        r += n;
    }
    return cache;
}

std::vector<OpCase> RmsQkvOp::cases(uint64_t seed) {
    struct Shape {
        QkvKind kind;
        uint32_t row_begin, n_rows;
        bool qwen;  // bias and QK-norm (blocks of whole heads)
    };
    std::vector<OpCase> out;
    // The K/V stores into a bf16 cache: each K/V shape once (BF16 weights; F16 with bias and QK-norm).
    for (const KvType kv_type : {KvType::f32, KvType::bf16})
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{QkvKind::q, 16, 80, false}, Shape{QkvKind::k, 8, 40, false},
                               Shape{QkvKind::v, 0, 64, false}, Shape{QkvKind::q, 32, 64, true},
                               Shape{QkvKind::k, 32, 32, true}}) {
            if (s.qwen && dtype != DType::F16 && dtype != DType::Q4_K) continue;  // the matrix formats run above
            if (kv_type == KvType::bf16 && (s.kind == QkvKind::q || dtype != (s.qwen ? DType::F16 : DType::BF16))) continue;
            const ModelDims dims{.n_layers = 2, .d_model = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                                 .kv_type = uint32_t(kv_type)};
            const uint32_t rows = s.kind == QkvKind::q ? dims.q_dim() : dims.kv_dim();
            CaseBuilder c(dims, seed++);
            c.caches(12);
            c.buffers().step.pos = 9;
            const uint32_t weight = c.weight(dtype, rows, dims.d_model, 0.5f);
            const uint32_t norm = c.weight(DType::F32, 1, dims.d_model);
            const uint32_t bias = s.qwen ? c.weight(DType::F32, 1, rows) : kNoWeight;
            const uint32_t qk_norm = s.qwen ? c.weight(DType::F32, 1, dims.head_dim) : kNoWeight;
            const uint32_t x = c.activation(dims.d_model), q = c.activation(dims.q_dim());
            const RmsQkvArgs a{1, uint32_t(s.kind), s.row_begin, s.n_rows, x, q, weight, norm, bias, qk_norm,
                               dims.d_model, dims.head_dim};
            out.push_back(c.finish(fmt::format("rms_qkv {} {} rows [{}, {}){} {} cache", dtype_name(dtype), "qkv"[a.kind],
                                               s.row_begin, s.row_begin + s.n_rows, s.qwen ? " bias qk_norm" : "",
                                               kv_type_name(dims.kv_type)),
                                   make_instruction<RmsQkvOp>(a)));
        }
    return out;
}

}  // namespace mk

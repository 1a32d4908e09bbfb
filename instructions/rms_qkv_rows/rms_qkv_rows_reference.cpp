// rms_qkv_rows' float64 reference and cases: Q, K and V blocks for a chunk (full and shorter), with and without
// Qwen2 biases and Qwen3 QK-norm, whole chunks and token blocks; RoPE at each token's position; K and V at the
// block's rows pos + j of the cache only.
#include "instructions/rms_qkv_rows/rms_qkv_rows.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> RmsQkvRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsQkvRowsArgs>(ins);
    const uint32_t hd = a.head_dim, n = step_tokens(b.step, a.n_tok), q_dim = b.dims.q_dim();
    const QkvKind kind = QkvKind(a.kind);
    // Each token's rows are rms_qkv's for that token at its position.
    const RmsQkvArgs one{.layer = a.layer, .kind = a.kind, .row_begin = a.row_begin, .n_rows = a.n_rows,
                         .weight = a.weight, .norm = a.norm, .bias = a.bias, .qk_norm = a.qk_norm,
                         .d_model = a.d_model, .head_dim = a.head_dim};
    const TokenBlock tokens = a.tokens();
    std::vector<Expected> result;
    for (uint32_t j = tokens.begin; j < tokens.end; ++j) {
        const int32_t pos = b.step.pos + int32_t(j);
        // A token past the chunk's end leaves its rows as they were (filled in below).
        std::vector<double> out =
            j < n ? RmsQkvOp::reference_rows(b, one, ref_f32(b, a.x_off + 4ull * j * a.d_model, a.d_model), pos)
                  : std::vector<double>(a.n_rows);
        if (kind == QkvKind::q) {
            const uint64_t off = a.q_off + 4ull * (uint64_t(j) * q_dim + a.row_begin);
            if (j >= n) out = ref_f32(b, off, a.n_rows);  // left as it was
            result.push_back(ref_arena(fmt::format("q[{}]", j), off, std::move(out)));
            continue;
        }
        const std::vector<float>& cache = kind == QkvKind::k ? b.k_cache : b.v_cache;
        for (uint32_t r = 0; r < a.n_rows;) {  // one run per KV head the block touches
            const uint32_t row = a.row_begin + r, m = std::min(a.n_rows - r, hd - row % hd);
            const uint64_t begin = b.cache_index(a.layer, row / hd, pos) + row % hd;
            std::vector<double> values(out.begin() + r, out.begin() + r + m);
            if (j >= n)
                for (uint32_t i = 0; i < m; ++i) values[i] = cache[begin + i];
            result.push_back(ref_kv_store(b, fmt::format("{} cache head {} position {}", kind == QkvKind::k ? "K" : "V",
                                                          row / hd, pos),
                                          kind == QkvKind::k ? Space::k_cache : Space::v_cache, begin, std::move(values)));
            r += m;
        }
    }
    return result;
}

std::vector<OpCase> RmsQkvRowsOp::cases(uint64_t seed) {
    struct Shape {
        QkvKind kind;
        uint32_t row_begin, n_rows;
        bool qwen;  // bias and QK-norm (blocks of whole heads)
        uint32_t tok_begin = 0, tok_count = 0;  // the token block (count 0: through the chunk's end)
        uint32_t n_tok = 4;                     // 8 or more in BF16 or F16: MMA tiles (page_plan.hpp)
    };
    std::vector<OpCase> out;
    for (const KvType kv_type : {KvType::f32, KvType::bf16})  // bf16: the K/V shapes in BF16 weights
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_1, DType::Q4_K})
        for (const Shape& s : {Shape{QkvKind::q, 16, 80, false}, Shape{QkvKind::k, 8, 40, false},
                               Shape{QkvKind::v, 0, 64, false}, Shape{QkvKind::q, 32, 64, true},
                               Shape{QkvKind::k, 32, 32, true}, Shape{QkvKind::q, 0, 64, false, 1, 2},
                               Shape{QkvKind::v, 8, 24, false, 2, 0}, Shape{QkvKind::k, 32, 32, true, 2, 2},
                               Shape{QkvKind::q, 16, 40, false, 0, 0, 12}, Shape{QkvKind::k, 32, 32, true, 2, 9, 12},
                               Shape{QkvKind::v, 0, 64, false, 0, 0, 12}}) {
            if (s.qwen && dtype != DType::BF16) continue;
            if (kv_type == KvType::bf16 && (s.kind == QkvKind::q || dtype != DType::BF16)) continue;
            const ModelDims dims{.n_layers = 2, .d_model = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                                 .kv_type = uint32_t(kv_type)};
            const uint32_t rows = s.kind == QkvKind::q ? dims.q_dim() : dims.kv_dim(), n_tok = s.n_tok;
            CaseBuilder c(dims, seed++);
            c.caches(n_tok > 4 ? 32 : 16);
            c.buffers().step.pos = 9;
            // V: the step cuts the chunk (and a block) short
            c.buffers().step.n_tokens = int32_t(s.kind == QkvKind::v ? n_tok - 1 : n_tok);
            const uint32_t weight = c.weight(dtype, rows, dims.d_model, 0.5f);
            const uint32_t norm = c.weight(DType::F32, 1, dims.d_model);
            const uint32_t bias = s.qwen ? c.weight(DType::F32, 1, rows) : kNoWeight;
            const uint32_t qk_norm = s.qwen ? c.weight(DType::F32, 1, dims.head_dim) : kNoWeight;
            const uint32_t x = c.activation(uint64_t(n_tok) * dims.d_model), q = c.activation(uint64_t(n_tok) * dims.q_dim());
            const RmsQkvRowsArgs a{1, uint32_t(s.kind), s.row_begin, s.n_rows, x, q, weight, norm, bias, qk_norm,
                                   dims.d_model, dims.head_dim, n_tok, s.tok_begin, s.tok_count};
            const TokenBlock tokens = a.tokens();
            out.push_back(c.finish(fmt::format("rms_qkv_rows {} {} rows [{}, {}){} tokens [{}, {}) {} of {} tokens, {} cache",
                                               dtype_name(dtype), "qkv"[a.kind], s.row_begin, s.row_begin + s.n_rows,
                                               s.qwen ? " bias qk_norm" : "", tokens.begin, tokens.end,
                                               c.buffers().step.n_tokens, n_tok, kv_type_name(dims.kv_type)),
                                   make_instruction<RmsQkvRowsOp>(a)));
        }
    return out;
}

}  // namespace mk

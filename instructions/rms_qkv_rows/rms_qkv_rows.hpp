// rms_qkv_rows (prefill): rms_qkv for a token block of the chunk (tok_begin, tok_count; 0: through the chunk's
// end) — RMSNorm of each of its residual rows, a block of Q, K or V rows against them (+ bias, + QK-norm), RoPE at
// each token's position pos + j, and K/V written to the cache at the block's rows pos + j only. Row blocks hold
// whole rotary pairs, and whole heads when QK-norm is on.
#pragma once
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"
#include "instructions/rms_qkv/rms_qkv.hpp"

namespace mk {

struct RmsQkvRowsArgs {
    uint32_t layer;
    uint32_t kind;        // QkvKind
    uint32_t row_begin;   // first output row of the block within Q (q_dim) or K/V (kv_dim)
    uint32_t n_rows;
    uint32_t x_off;       // (n_tok, d_model) fp32 residual streams
    uint32_t q_off;       // (n_tok, q_dim) fp32 queries (kind q only)
    uint32_t weight;      // wq/wk/wv (heads * head_dim, d_model)
    uint32_t norm;        // attn_norm (d_model) f32
    uint32_t bias;        // bq/bk/bv or kNoWeight
    uint32_t qk_norm;     // q_norm/k_norm (head_dim) f32 or kNoWeight
    uint32_t d_model;
    uint32_t head_dim;
    uint32_t n_tok;       // the compiled chunk size T
    uint32_t tok_begin = 0;  // the token block: tokens [tok_begin, tok_begin + tok_count) of the chunk
    uint32_t tok_count = 0;  // 0: through the chunk's end
    MK_HOST_DEVICE TokenBlock tokens() const { return token_block(tok_begin, tok_count, n_tok); }
};

struct RmsQkvRowsOp {
    static constexpr Opcode opcode = Opcode::rms_qkv_rows;
    using Args = RmsQkvRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims& dims) {
        auto a = decode_args<RmsQkvRowsArgs>(ins);
        const TokenBlock tokens = a.tokens();
        std::vector<Access> out;
        append_token_rows(out, a.x_off, a.d_model, 0, a.d_model, tokens, false);
        if (QkvKind(a.kind) == QkvKind::q) {
            append_token_rows(out, a.q_off, dims.q_dim(), a.row_begin, a.n_rows, tokens, true);
        } else {
            uint64_t slot = uint64_t(a.layer) * dims.kv_dim() + a.row_begin;
            Space space = QkvKind(a.kind) == QkvKind::k ? Space::k_cache : Space::v_cache;
            out.push_back({space, slot, slot + a.n_rows, true, PosMode::at_pos, tokens.count(), tokens.begin});
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsQkvRowsArgs>(ins);
        std::vector<uint32_t> ids{a.weight, a.norm};
        for (uint32_t id : present({a.bias, a.qk_norm})) ids.push_back(id);
        return ids;
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsQkvRowsArgs>(ins);
        return prefill_rows_plan(in, {a.weight}, a.row_begin, a.n_rows, a.tokens().count());
    }
    static Cost cost(const Instruction& ins, const ModelDims& dims, const WeightFormat* w) {
        auto a = decode_args<RmsQkvRowsArgs>(ins);
        const uint64_t rows = a.n_rows;
        const uint64_t out_bytes = QkvKind(a.kind) == QkvKind::q ? 4 : dims.kv_bytes();  // K/V: the cache's type
        const uint64_t n = a.tokens().count();
        Cost c{rows * w[a.weight].row_bytes, n * (4ull * a.d_model + out_bytes * rows), 2ull * n * rows * a.d_model};
        c.token_columns = uint32_t(n);
        c.later_token_block = a.tokens().begin > 0;
        return c;
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);
};

}  // namespace mk

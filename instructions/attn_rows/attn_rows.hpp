// attn_rows (prefill): causal attention of a block of the chunk's queries for one KV head's group of query
// heads: query j (position pos + j) over cache rows 0..pos+j, which hold the earlier chunks and this one's
// keys up to itself. Softmax in one pass per query (no partials: a chunk has enough queries to spread).
#pragma once
#include "instructions/common/token_rows.hpp"
#include "instructions/registry.hpp"

namespace mk {

struct AttnRowsArgs {
    uint32_t layer;
    uint32_t kv_head;
    uint32_t q_begin;   // first query (token) of the block
    uint32_t n_q;       // queries in the block
    uint32_t q_off;     // (n_tok, n_heads, head_dim) fp32 queries
    uint32_t out_off;   // (n_tok, n_heads, head_dim) fp32 attention outputs
    uint32_t head_dim;
    uint32_t group;     // query heads per KV head
    uint32_t n_tok;     // the compiled chunk size T
};

struct AttnRowsOp {
    static constexpr Opcode opcode = Opcode::attn_rows;
    using Args = AttnRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims& dims) {
        auto a = decode_args<AttnRowsArgs>(ins);
        if (a.kv_head >= dims.n_kv_heads || uint64_t(a.kv_head + 1) * a.group > dims.n_heads ||
            uint64_t(a.q_begin) + a.n_q > a.n_tok)
            fail_args(a, dims);
        const uint64_t slot = uint64_t(a.layer) * dims.kv_dim() + uint64_t(a.kv_head) * a.head_dim;
        std::vector<Access> out{{Space::k_cache, slot, slot + a.head_dim, false, PosMode::upto_pos, a.n_tok},
                                {Space::v_cache, slot, slot + a.head_dim, false, PosMode::upto_pos, a.n_tok}};
        const uint32_t q_dim = dims.q_dim(), h0 = a.kv_head * a.group * a.head_dim, width = a.group * a.head_dim;
        for (uint32_t j = a.q_begin; j < a.q_begin + a.n_q; ++j) {
            const uint64_t q = a.q_off + 4ull * (uint64_t(j) * q_dim + h0), o = a.out_off + 4ull * (uint64_t(j) * q_dim + h0);
            out.push_back({Space::arena, q, q + 4ull * width, false});
            out.push_back({Space::arena, o, o + 4ull * width, true});
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    // Cost at a nominal 512-token context (as attn_partial): each query reads its keys and values once.
    static Cost cost(const Instruction& ins, const ModelDims& dims, const WeightFormat*) {
        auto a = decode_args<AttnRowsArgs>(ins);
        const uint64_t positions = 512;
        return {0, 2ull * dims.kv_bytes() * positions * a.head_dim, 4 * positions * a.head_dim * a.group * a.n_q};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    [[noreturn]] static void fail_args(const AttnRowsArgs& a, const ModelDims& dims);
    static std::string describe(const Instruction& ins);
};

}  // namespace mk

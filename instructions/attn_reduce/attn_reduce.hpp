// attn_reduce: merges the partials of one KV head's query heads in a fixed order (log-sum-exp),
// writing the normalized attention output of those heads.
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct AttnReduceArgs {
    uint32_t layer;
    uint32_t kv_head;
    uint32_t n_parts;
    uint32_t o_off;    // (n_heads, n_parts, head_dim) fp32 partial outputs
    uint32_t ml_off;   // (n_heads, n_parts, 2) fp32
    uint32_t out_off;  // (n_heads, head_dim) fp32 attention output
    uint32_t head_dim;
    uint32_t group;
};

struct AttnReduceOp {
    static constexpr Opcode opcode = Opcode::attn_reduce;
    using Args = AttnReduceArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<AttnReduceArgs>(ins);
        const uint64_t h0 = uint64_t(a.kv_head) * a.group, h1 = h0 + a.group;
        return {
            {Space::arena, a.o_off + 4 * h0 * a.n_parts * a.head_dim, a.o_off + 4 * h1 * a.n_parts * a.head_dim, false},
            {Space::arena, a.ml_off + 8 * h0 * a.n_parts, a.ml_off + 8 * h1 * a.n_parts, false},
            {Space::arena, a.out_off + 4 * h0 * a.head_dim, a.out_off + 4 * h1 * a.head_dim, true},
        };
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat*) {
        auto a = decode_args<AttnReduceArgs>(ins);
        uint64_t values = uint64_t(a.group) * a.n_parts * (a.head_dim + 2);
        return {0, 4 * values, 3 * values};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (attn_reduce_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

// attn_partial: one KV head x one chunk of positions. For each query head of the group it writes
// the unnormalized output sum(exp(s - m) v), the chunk's max score m and its sum l = sum(exp(s - m)).
// The chunk bounds come from the step's position at run time; an empty chunk writes m = -inf, l = 0.
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct AttnPartialArgs {
    uint32_t layer;
    uint32_t kv_head;
    uint32_t part;
    uint32_t n_parts;
    uint32_t q_off;   // (n_heads, head_dim) fp32 queries
    uint32_t o_off;   // (n_heads, n_parts, head_dim) fp32 unnormalized partial outputs
    uint32_t ml_off;  // (n_heads, n_parts, 2) fp32 (max score, sum of exp)
    uint32_t head_dim;
    uint32_t group;   // query heads per KV head
};

// Positions [begin, end) of chunk `part` when positions 0..pos are split into n_parts equal chunks.
MK_HOST_DEVICE inline void attn_chunk(int32_t pos, uint32_t part, uint32_t n_parts, int32_t& begin, int32_t& end) {
    const int32_t n = pos + 1;
    const int32_t chunk = (n + int32_t(n_parts) - 1) / int32_t(n_parts);
    begin = int32_t(part) * chunk < n ? int32_t(part) * chunk : n;
    end = begin + chunk < n ? begin + chunk : n;
}

struct AttnPartialOp {
    static constexpr Opcode opcode = Opcode::attn_partial;
    using Args = AttnPartialArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims& dims) {
        auto a = decode_args<AttnPartialArgs>(ins);
        // One access per query head of the group: a corrupt group would ask for billions of them.
        if (a.n_parts == 0 || a.part >= a.n_parts || a.kv_head >= dims.n_kv_heads ||
            uint64_t(a.kv_head + 1) * a.group > dims.n_heads)
            fail_heads(a, dims);
        const uint64_t h0 = uint64_t(a.kv_head) * a.group;
        const uint64_t slot = uint64_t(a.layer) * dims.kv_dim() + uint64_t(a.kv_head) * a.head_dim;
        std::vector<Access> out{
            {Space::arena, a.q_off + 4 * h0 * a.head_dim, a.q_off + 4 * (h0 + a.group) * a.head_dim, false},
            {Space::k_cache, slot, slot + a.head_dim, false, PosMode::upto_pos},
            {Space::v_cache, slot, slot + a.head_dim, false, PosMode::upto_pos},
        };
        for (uint64_t h = h0; h < h0 + a.group; ++h) {
            uint64_t o = a.o_off + 4 * (h * a.n_parts + a.part) * a.head_dim;
            uint64_t ml = a.ml_off + 8 * (h * a.n_parts + a.part);
            out.push_back({Space::arena, o, o + 4ull * a.head_dim, true});
            out.push_back({Space::arena, ml, ml + 8, true});
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    // Cost at a nominal 512-token context; the simulator scales attention with the position it models.
    static Cost cost(const Instruction& ins, const ModelDims& dims, const WeightFormat*) {
        auto a = decode_args<AttnPartialArgs>(ins);
        uint64_t positions = (512 + a.n_parts - 1) / a.n_parts;
        return {0, 2ull * dims.kv_bytes() * positions * a.head_dim, 4 * positions * a.head_dim * a.group};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (attn_partial_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    [[noreturn]] static void fail_heads(const AttnPartialArgs& a, const ModelDims& dims);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

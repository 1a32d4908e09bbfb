// embed: x = the step token's row of the embedding table, dequantized to fp32.
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct EmbedArgs {
    uint32_t weight;  // token_embedding (vocab, d_model)
    uint32_t x_off;   // (d_model) fp32 residual stream
    uint32_t d_model;
    uint32_t pad = 0;
};

struct EmbedOp {
    static constexpr Opcode opcode = Opcode::embed;
    using Args = EmbedArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<EmbedArgs>(ins);
        return {{Space::arena, a.x_off, a.x_off + 4ull * a.d_model, true}};
    }
    // One row whose index is known only at run time: no page plan (a GPU loads it directly).
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<EmbedArgs>(ins);
        return {a.weight};
    }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<EmbedArgs>(ins);
        return {w[a.weight].row_bytes, 4ull * a.d_model, 0};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (embed_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-6};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

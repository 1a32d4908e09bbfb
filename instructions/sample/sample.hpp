// sample: the step's token. Greedy reduces the LM-head blocks' argmaxes in block order; otherwise
// the full logits go through the shared sampling rule (sampling.hpp).
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct SampleArgs {
    uint32_t logits_off;  // (vocab) fp32
    uint32_t argmax_off;  // (n_blocks) x {f32 value, i32 index}
    uint32_t n_blocks;
    uint32_t vocab;
    uint32_t token_off;   // (1) i32 sampled token
};

struct SampleOp {
    static constexpr Opcode opcode = Opcode::sample;
    using Args = SampleArgs;
    // It writes the step's token: the backend posts it to the host (and stops on a stop token).
    MK_HOST_DEVICE static Effects effects(const Instruction& ins) {
        return {kNoRank, decode_args<SampleArgs>(ins).token_off};
    }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<SampleArgs>(ins);
        return {{Space::arena, a.logits_off, a.logits_off + 4ull * a.vocab, false},
                {Space::arena, a.argmax_off, a.argmax_off + 8ull * a.n_blocks, false},
                {Space::arena, a.token_off, a.token_off + 4, true}};
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat*) {
        auto a = decode_args<SampleArgs>(ins);
        return {0, 8ull * a.n_blocks, a.n_blocks};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (sample_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{0};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

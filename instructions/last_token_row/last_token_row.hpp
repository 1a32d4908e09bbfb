// last_token_row (prefill): the step's last token's row of a (T, width) fp32 buffer copied into a (width) fp32
// buffer. Where only the last token's logits are wanted, the last layer's projections after attention run on that
// token alone (prefill_graph.cpp): its residual stream and attention output are copied out first, since which
// token is the last is known at run time only (a prompt's last chunk may be shorter than T). A step of no tokens
// copies nothing.
#pragma once
#include "instructions/common/token_rows.hpp"
#include "instructions/registry.hpp"

namespace mk {

struct LastTokenRowArgs {
    uint32_t src_off;  // (n_tok, width) fp32
    uint32_t dst_off;  // (width) fp32
    uint32_t width;
    uint32_t n_tok;    // the compiled chunk size T
};

struct LastTokenRowOp {
    static constexpr Opcode opcode = Opcode::last_token_row;
    using Args = LastTokenRowArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    // Any of the chunk's rows may be the last one: the reads cover them all.
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<LastTokenRowArgs>(ins);
        return {{Space::arena, a.src_off, a.src_off + 4ull * a.n_tok * a.width, false},
                {Space::arena, a.dst_off, a.dst_off + 4ull * a.width, true}};
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat*) {
        return {0, 8ull * decode_args<LastTokenRowArgs>(ins).width, 0};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{0};  // a copy
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

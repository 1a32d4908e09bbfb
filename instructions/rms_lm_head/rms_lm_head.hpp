// rms_lm_head: the final RMSNorm, a block of LM-head rows (logits) and the block's argmax
// (value, index; lowest index wins ties) for the sample op to reduce in a fixed order.
#pragma once
#include "instructions/common/page_plan.hpp"

namespace mk {

struct RmsLmHeadArgs {
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t block;       // index of this block's argmax slot
    uint32_t d_model;
    uint32_t x_off;       // (d_model) fp32 residual stream
    uint32_t logits_off;  // (vocab) fp32
    uint32_t argmax_off;  // (n_blocks) x {f32 value, i32 index}
    uint32_t weight;      // lm_head (vocab, d_model)
    uint32_t norm;        // output_norm (d_model) f32
};

struct RmsLmHeadOp {
    static constexpr Opcode opcode = Opcode::rms_lm_head;
    using Args = RmsLmHeadArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<RmsLmHeadArgs>(ins);
        uint64_t logits = a.logits_off + 4ull * a.row_begin, slot = a.argmax_off + 8ull * a.block;
        return {{Space::arena, a.x_off, a.x_off + 4ull * a.d_model, false},
                {Space::arena, logits, logits + 4ull * a.n_rows, true},
                {Space::arena, slot, slot + 8, true}};
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsLmHeadArgs>(ins);
        return {a.weight, a.norm};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsLmHeadArgs>(ins);
        return row_tiles_plan(in, a.weight, a.row_begin, a.n_rows);
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<RmsLmHeadArgs>(ins);
        return {uint64_t(a.n_rows) * w[a.weight].row_bytes, 4ull * (a.d_model + a.n_rows), 2ull * a.n_rows * a.d_model};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (rms_lm_head_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

// rms_gate_up: RMSNorm of the residual, then a block of rows of the gate and up projections
// combined as act[rows] = silu(gate . xn) * (up . xn).
#pragma once
#include "instructions/common/page_plan.hpp"

namespace mk {

struct RmsGateUpArgs {
    uint32_t layer;
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t d_model;
    uint32_t x_off;    // (d_model) fp32 residual stream
    uint32_t act_off;  // (d_ff) fp32 MLP activation
    uint32_t gate;     // w_gate (d_ff, d_model)
    uint32_t up;       // w_up (d_ff, d_model)
    uint32_t norm;     // ffn_norm (d_model) f32
};

struct RmsGateUpOp {
    static constexpr Opcode opcode = Opcode::rms_gate_up;
    using Args = RmsGateUpArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<RmsGateUpArgs>(ins);
        uint64_t act = a.act_off + 4ull * a.row_begin;
        return {{Space::arena, a.x_off, a.x_off + 4ull * a.d_model, false},
                {Space::arena, act, act + 4ull * a.n_rows, true}};
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsGateUpArgs>(ins);
        return {a.gate, a.up, a.norm};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsGateUpArgs>(ins);
        return paired_row_tiles_plan(in, a.gate, a.up, a.row_begin, a.n_rows);
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<RmsGateUpArgs>(ins);
        return {uint64_t(a.n_rows) * (w[a.gate].row_bytes + w[a.up].row_bytes), 4ull * (a.d_model + a.n_rows),
                4ull * a.n_rows * a.d_model};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (rms_gate_up_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

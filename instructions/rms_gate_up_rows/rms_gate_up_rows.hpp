// rms_gate_up_rows (prefill): rms_gate_up for the chunk's T tokens — each residual row normed, a block of
// gate and up rows against all T, act[j][rows] = silu(gate) * up. Each weight row is read once per chunk.
#pragma once
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"

namespace mk {

struct RmsGateUpRowsArgs {
    uint32_t layer;
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t d_model;
    uint32_t x_off;    // (n_tok, d_model) fp32 residual streams
    uint32_t act_off;  // (n_tok, d_ff) fp32 MLP activations
    uint32_t gate;     // w_gate (d_ff, d_model)
    uint32_t up;       // w_up (d_ff, d_model)
    uint32_t norm;     // ffn_norm (d_model) f32
    uint32_t d_ff;
    uint32_t n_tok;    // the compiled chunk size T
};

struct RmsGateUpRowsOp {
    static constexpr Opcode opcode = Opcode::rms_gate_up_rows;
    using Args = RmsGateUpRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        std::vector<Access> out{{Space::arena, a.x_off, a.x_off + 4ull * a.n_tok * a.d_model, false}};
        append_token_rows(out, a.act_off, a.d_ff, a.row_begin, a.n_rows, a.n_tok, true);
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        return {a.gate, a.up, a.norm};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        return paired_row_tiles_plan(in, a.gate, a.up, a.row_begin, a.n_rows);
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        Cost c{uint64_t(a.n_rows) * (w[a.gate].row_bytes + w[a.up].row_bytes), 4ull * a.n_tok * (a.d_model + a.n_rows),
               4ull * a.n_tok * a.n_rows * a.d_model};
        c.mma_flops = mma_eligible_flops(w[a.gate], a.n_tok, c.flops);
        return c;
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);
};

}  // namespace mk

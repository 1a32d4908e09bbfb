// rms_gate_up_rows (prefill): rms_gate_up for the chunk's T tokens — each residual row normed, a block of
// gate and up rows against a token block of the chunk (tok_begin, tok_count; 0: through the chunk's end),
// act[j][rows] = silu(gate) * up. Each weight row is read once per token block; each token normed by the
// instructions that need it.
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
    uint32_t tok_begin = 0;  // the token block: tokens [tok_begin, tok_begin + tok_count) of the chunk
    uint32_t tok_count = 0;  // 0: through the chunk's end
    MK_HOST_DEVICE TokenBlock tokens() const { return token_block(tok_begin, tok_count, n_tok); }
};

struct RmsGateUpRowsOp {
    static constexpr Opcode opcode = Opcode::rms_gate_up_rows;
    using Args = RmsGateUpRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        std::vector<Access> out;
        append_token_rows(out, a.x_off, a.d_model, 0, a.d_model, a.tokens(), false);
        append_token_rows(out, a.act_off, a.d_ff, a.row_begin, a.n_rows, a.tokens(), true);
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        return {a.gate, a.up, a.norm};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        return prefill_rows_plan(in, {a.gate, a.up}, a.row_begin, a.n_rows, a.tokens().count());
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<RmsGateUpRowsArgs>(ins);
        const uint64_t n = a.tokens().count();
        Cost c{uint64_t(a.n_rows) * (w[a.gate].row_bytes + w[a.up].row_bytes), 4ull * n * (a.d_model + a.n_rows),
               4ull * n * a.n_rows * a.d_model};
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

// matmul_add (prefill): a block of output rows of a matrix times the chunk's T input vectors, added into
// the fp32 residual streams: x[j][rows] += W[rows, :] . in[j] (the O- and down-projections of a chunk), or with
// `store` written as they are (a tensor-parallel rank's partial results, summed later by reduce_add).
// An instruction covers a row block x a token block (tok_begin, tok_count; 0: through the chunk's end); each
// weight row is read once for the block's tokens.
#pragma once
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"

namespace mk {

struct MatmulAddArgs {
    uint32_t weight;   // wo (d_model, q_dim) or w_down (d_model, d_ff)
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t cols;
    uint32_t in_off;   // (n_tok, cols) fp32 inputs
    uint32_t x_off;    // (n_tok, x_width) fp32 residual streams
    uint32_t x_width;  // d_model
    uint32_t n_tok;    // the compiled chunk size T
    uint32_t store;    // 1: x[j][rows] = W . in[j] (no add)
    uint32_t tok_begin = 0;  // the token block: tokens [tok_begin, tok_begin + tok_count) of the chunk
    uint32_t tok_count = 0;  // 0: through the chunk's end
    MK_HOST_DEVICE TokenBlock tokens() const { return token_block(tok_begin, tok_count, n_tok); }
};

struct MatmulAddOp {
    static constexpr Opcode opcode = Opcode::matmul_add;
    using Args = MatmulAddArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<MatmulAddArgs>(ins);
        std::vector<Access> out;
        append_token_rows(out, a.in_off, a.cols, 0, a.cols, a.tokens(), false);
        append_token_rows(out, a.x_off, a.x_width, a.row_begin, a.n_rows, a.tokens(), true);
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) { return {decode_args<MatmulAddArgs>(ins).weight}; }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<MatmulAddArgs>(ins);
        return prefill_rows_plan(in, {a.weight}, a.row_begin, a.n_rows, a.tokens().count());
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<MatmulAddArgs>(ins);
        const uint64_t n = a.tokens().count();
        Cost c{uint64_t(a.n_rows) * w[a.weight].row_bytes, 4ull * n * (a.cols + 2 * a.n_rows), 2ull * n * a.n_rows * a.cols};
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

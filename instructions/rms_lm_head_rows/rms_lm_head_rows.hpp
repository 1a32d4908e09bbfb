// rms_lm_head_rows (prefill): the final RMSNorm and a block of LM-head rows for the chunk's last token
// (logits (vocab)), or with `all` for every token of a token block of the chunk (logits (T, vocab), for perplexity
// and tests; tok_begin, tok_count as the other rows ops: blocks short enough for MMA tiles).
// The host samples from the logits of the last token (the shared sampling rule, instructions/sample/sampling.hpp).
#pragma once
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"

namespace mk {

struct RmsLmHeadRowsArgs {
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t d_model;
    uint32_t x_off;       // (n_tok, d_model) fp32 residual streams
    uint32_t logits_off;  // (n_tok, vocab) fp32 with `all`, else (vocab) fp32
    uint32_t weight;      // lm_head (vocab, d_model)
    uint32_t norm;        // output_norm (d_model) f32
    uint32_t vocab;
    uint32_t n_tok;       // the compiled chunk size T
    uint32_t all;         // 1: every token's logits; 0: the last token's
    uint32_t tok_begin = 0;  // with `all`: the token block, tokens [tok_begin, tok_begin + tok_count) of the chunk
    uint32_t tok_count = 0;  // 0: through the chunk's end (an .mks written before token blocks: the whole chunk)
    // The logits rows this instruction writes: the block's (all), or row 0 for the last token.
    MK_HOST_DEVICE TokenBlock tokens() const { return all ? token_block(tok_begin, tok_count, n_tok) : TokenBlock{0, 1}; }
};

struct RmsLmHeadRowsOp {
    static constexpr Opcode opcode = Opcode::rms_lm_head_rows;
    using Args = RmsLmHeadRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<RmsLmHeadRowsArgs>(ins);
        std::vector<Access> out;
        // The last token's row is known at run time only: any row of x.
        append_token_rows(out, a.x_off, a.d_model, 0, a.d_model, a.all ? a.tokens() : TokenBlock{0, a.n_tok}, false);
        append_token_rows(out, a.logits_off, a.vocab, a.row_begin, a.n_rows, a.tokens(), true);
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsLmHeadRowsArgs>(ins);
        return {a.weight, a.norm};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsLmHeadRowsArgs>(ins);
        return prefill_rows_plan(in, {a.weight}, a.row_begin, a.n_rows, a.tokens().count());
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<RmsLmHeadRowsArgs>(ins);
        const uint64_t cols = a.tokens().count();
        Cost c{uint64_t(a.n_rows) * w[a.weight].row_bytes, 4ull * cols * (a.d_model + a.n_rows),
               2ull * cols * a.n_rows * a.d_model};
        c.token_columns = uint32_t(cols);
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

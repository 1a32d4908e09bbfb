// embed_rows (prefill): x[j] = the embedding row of the chunk's token j, dequantized to fp32, for the step's
// tokens of the instruction's token block (rows past them are left as they are). The tokens are in the arena,
// written by the host. The chunk's blocks go to as many SMs: one SM embedding all 512 tokens of the Llama-3.2-1B
// shape (6 MB moved) held the other 131 for ~0.2 ms of a ~9 ms step (the device cost model).
#pragma once
#include "instructions/common/token_rows.hpp"
#include "instructions/registry.hpp"

namespace mk {

struct EmbedRowsArgs {
    uint32_t weight;      // token_embedding (vocab, d_model)
    uint32_t tokens_off;  // (n_tok) i32 the chunk's tokens
    uint32_t x_off;       // (n_tok, d_model) fp32 residual streams
    uint32_t d_model;
    uint32_t n_tok;       // the compiled chunk size T
    uint32_t tok_begin = 0, tok_count = 0;  // the token block (token_rows.hpp; 0: through the chunk's end)
};

struct EmbedRowsOp {
    static constexpr Opcode opcode = Opcode::embed_rows;
    using Args = EmbedRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<EmbedRowsArgs>(ins);
        const TokenBlock b = token_block(a.tok_begin, a.tok_count, a.n_tok);
        return {{Space::arena, a.tokens_off + 4ull * b.begin, a.tokens_off + 4ull * b.end, false},
                {Space::arena, a.x_off + 4ull * b.begin * a.d_model, a.x_off + 4ull * b.end * a.d_model, true}};
    }
    // Rows whose indices are known only at run time: no page plan (as embed).
    static std::vector<uint32_t> weights(const Instruction& ins) { return {decode_args<EmbedRowsArgs>(ins).weight}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<EmbedRowsArgs>(ins);
        const uint32_t n = token_block(a.tok_begin, a.tok_count, a.n_tok).count();
        return {n * w[a.weight].row_bytes, 4ull * n * (a.d_model + 1), 0};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{1e-6};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);
};

}  // namespace mk

// Builds the prefill-step graph: a chunk of up to T tokens through every layer at once. embed_rows; per layer
// rms_qkv_rows blocks (K/V for the chunk's T positions), attn_rows (a KV head x a block of queries), matmul_add
// O blocks, rms_gate_up_rows blocks, matmul_add down blocks; rms_lm_head_rows blocks. Each weight row is read
// once per chunk. The host writes the tokens and samples from the last token's logits (no sample op).
#include <algorithm>

#include "instructions/all_ops.hpp"
#include "models/error.hpp"
#include "scheduler/graph.hpp"

namespace mk {

namespace {

class PrefillBuilder {
public:
    PrefillBuilder(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target, uint32_t n_tok,
                   bool all_logits)
        : target_(target), n_tok_(n_tok), all_logits_(all_logits) {
        graph_.dims = dims;
        graph_.weights = weights;
        graph_.prefill_tokens = n_tok;
        graph_.all_logits = all_logits ? 1 : 0;
        plan_inputs_ = {graph_.weights.data(), target.page_bytes, target.n_pages};
    }

    Graph build();

private:
    uint32_t buffer(const std::string& name, uint64_t bytes, const std::string& layout) {
        const uint64_t offset = add_arena_buffer(graph_, name, bytes, layout);
        if (graph_.arena_bytes > UINT32_MAX) fail("prefill graph: the activation arena exceeds 4 GiB; use a smaller chunk");
        return uint32_t(offset);
    }
    uint32_t group(const std::string& name) {
        graph_.groups.push_back({name, 0});
        return uint32_t(graph_.groups.size() - 1);
    }
    template <typename Op>
    void add(const typename Op::Args& args, uint32_t group, std::vector<GroupDep> deps) {
        GraphNode node;
        node.ins = make_instruction<Op>(args);
        node.ins.seq = uint32_t(graph_.nodes.size());
        node.ins.n_pages = uint8_t(Op::page_plan(node.ins, plan_inputs_).n_pages);
        node.cost = Op::cost(node.ins, graph_.dims, graph_.weights.data());
        node.group = group;
        node.deps = std::move(deps);
        graph_.groups[group].n_members++;
        graph_.nodes.push_back(std::move(node));
    }
    // x[j] += W . in[j] for the chunk, in row blocks; returns the group that completes it.
    uint32_t projection(const std::string& name, uint32_t weight, uint32_t cols, uint32_t in, uint32_t ready) {
        const ModelDims& d = graph_.dims;
        const uint32_t rows = block_rows(d.d_model, target_.n_sms, 1), done = group(name);
        for (uint32_t r = 0; r < d.d_model; r += rows)
            add<MatmulAddOp>(MatmulAddArgs{weight, r, std::min(rows, d.d_model - r), cols, in, x_, d.d_model, n_tok_}, done,
                             {{ready, Operand::input}});
        return done;
    }

    const Target& target_;
    const uint32_t n_tok_;
    const bool all_logits_;
    Graph graph_;
    PlanInputs plan_inputs_;
    uint32_t x_ = 0;
};

Graph PrefillBuilder::build() {
    const ModelDims& d = graph_.dims;
    const uint32_t T = n_tok_, n_sms = target_.n_sms;
    const uint32_t tokens = buffer("tokens", 4ull * T, "(T) i32 the chunk's tokens (written by the host)");
    x_ = buffer("x", 4ull * T * d.d_model, "(T, d_model) fp32 residual streams");
    const uint32_t q = buffer("q", 4ull * T * d.q_dim(), "(T, n_heads, head_dim) fp32 queries");
    const uint32_t attn_out = buffer("attn_out", 4ull * T * d.q_dim(), "(T, n_heads, head_dim) fp32 attention outputs");
    const uint32_t act = buffer("act", 4ull * T * d.d_ff, "(T, d_ff) fp32 silu(gate) * up");
    const uint32_t logits = buffer("logits", 4ull * (all_logits_ ? T : 1) * d.vocab,
                                   all_logits_ ? "(T, vocab) fp32" : "(vocab) fp32 of the chunk's last token");
    graph_.rank_arena_bytes = align_up(graph_.arena_bytes, kBufferAlignBytes);
    graph_.arena_bytes = graph_.rank_arena_bytes;
    graph_.tokens_off = tokens;
    graph_.logits_off = logits;
    graph_.token_off = kNoOffset;  // the host samples

    // The next chunk's embed overwrites x, which this chunk's LM head reads.
    const uint32_t g_lm = group("lm_head");
    uint32_t ready = group("embed");
    add<EmbedRowsOp>(EmbedRowsArgs{global_weight_id(GlobalWeight::token_embedding), tokens, x_, d.d_model, T}, ready,
                     {{g_lm, Operand::output, true}});

    const uint32_t qkv_align = d.qk_norm ? d.head_dim : 2;  // QK-norm needs whole heads; RoPE needs pairs
    const uint32_t qkv_rows = block_rows(d.q_dim() + 2 * d.kv_dim(), n_sms, qkv_align);
    const uint32_t ff_rows = block_rows(d.d_ff, n_sms, 1);
    // Query blocks: enough instructions for the SMs, causal work grows with the query's index.
    const uint32_t q_parts = std::clamp<uint32_t>(n_sms / d.n_kv_heads, 1, T), q_rows = (T + q_parts - 1) / q_parts;
    for (uint32_t l = 0; l < d.n_layers; ++l) {
        auto lw = [&](LayerWeight w) { return layer_weight_id(l, w); };
        auto opt = [&](LayerWeight w) { return graph_.weights[lw(w)].present() ? lw(w) : kNoWeight; };
        const uint32_t g_qkv = group(fmt::format("qkv.L{}", l));
        for (uint32_t kind = 0; kind < 3; ++kind) {
            const uint32_t rows = kind == 0 ? d.q_dim() : d.kv_dim();
            const LayerWeight w = kind == 0 ? LayerWeight::wq : kind == 1 ? LayerWeight::wk : LayerWeight::wv;
            const LayerWeight bias = kind == 0 ? LayerWeight::bq : kind == 1 ? LayerWeight::bk : LayerWeight::bv;
            const uint32_t norm = kind == 0 ? opt(LayerWeight::q_norm) : kind == 1 ? opt(LayerWeight::k_norm) : kNoWeight;
            for (uint32_t r = 0; r < rows; r += qkv_rows)
                add<RmsQkvRowsOp>(RmsQkvRowsArgs{l, kind, r, std::min(qkv_rows, rows - r), x_, q, lw(w),
                                                 lw(LayerWeight::attn_norm), opt(bias), norm, d.d_model, d.head_dim, T},
                                  g_qkv, {{ready, Operand::input}});
        }
        const uint32_t g_attn = group(fmt::format("attn.L{}", l));
        for (uint32_t h = 0; h < d.n_kv_heads; ++h)
            for (uint32_t j = 0; j < T; j += q_rows)
                add<AttnRowsOp>(AttnRowsArgs{l, h, j, std::min(q_rows, T - j), q, attn_out, d.head_dim, d.group_size(), T},
                                g_attn, {{g_qkv, Operand::kv_cache}});
        const uint32_t g_o = projection(fmt::format("o_proj.L{}", l), lw(LayerWeight::wo), d.q_dim(), attn_out, g_attn);
        const uint32_t g_gate_up = group(fmt::format("gate_up.L{}", l));
        for (uint32_t r = 0; r < d.d_ff; r += ff_rows)
            add<RmsGateUpRowsOp>(RmsGateUpRowsArgs{l, r, std::min(ff_rows, d.d_ff - r), d.d_model, x_, act,
                                                   lw(LayerWeight::w_gate), lw(LayerWeight::w_up),
                                                   lw(LayerWeight::ffn_norm), d.d_ff, T},
                                 g_gate_up, {{g_o, Operand::input}});
        ready = projection(fmt::format("down.L{}", l), lw(LayerWeight::w_down), d.d_ff, act, g_gate_up);
    }
    const uint32_t lm_rows = block_rows(d.vocab, n_sms, 1);
    for (uint32_t r = 0; r < d.vocab; r += lm_rows)
        add<RmsLmHeadRowsOp>(RmsLmHeadRowsArgs{r, std::min(lm_rows, d.vocab - r), d.d_model, x_, logits,
                                               global_weight_id(GlobalWeight::lm_head),
                                               global_weight_id(GlobalWeight::output_norm), d.vocab, T, all_logits_},
                             g_lm, {{ready, Operand::input}});
    graph_.n_lm_blocks = (d.vocab + lm_rows - 1) / lm_rows;
    return std::move(graph_);
}

}  // namespace

Graph build_prefill_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target,
                          uint32_t n_tok, bool all_logits) {
    if (dims.n_layers == 0 || dims.d_model == 0 || dims.n_kv_heads == 0 || dims.n_heads % dims.n_kv_heads != 0)
        fail("prefill graph: invalid model dimensions");
    if (n_tok == 0 || n_tok > 4096) fail("prefill graph: a chunk of {} tokens (1 to 4096)", n_tok);
    if (weights.size() != n_weight_ids(dims.n_layers))
        fail("prefill graph: {} weight formats given, the model needs {}", weights.size(), n_weight_ids(dims.n_layers));
    return PrefillBuilder(dims, weights, target, n_tok, all_logits).build();
}

}  // namespace mk

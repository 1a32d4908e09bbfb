// Builds the decode-step graph: embed; per layer rms_qkv blocks, attention partials and reductions,
// O-projection blocks, gate/up blocks, down blocks; LM-head blocks; sample.
#include "scheduler/graph.hpp"

#include <algorithm>

#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/attn_reduce/attn_reduce.hpp"
#include "instructions/embed/embed.hpp"
#include "instructions/matvec_add/matvec_add.hpp"
#include "instructions/rms_gate_up/rms_gate_up.hpp"
#include "instructions/rms_lm_head/rms_lm_head.hpp"
#include "instructions/rms_qkv/rms_qkv.hpp"
#include "instructions/sample/sample.hpp"
#include "models/error.hpp"

namespace mk {

namespace {

// Smallest row block worth an instruction: below this the per-instruction and sync costs dominate.
constexpr uint32_t kMinBlockRows = 16;
constexpr uint32_t kMaxAttnParts = 32;

uint32_t div_up(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

// Rows per block so that a matrix of `rows` rows spreads over about `n_sms` blocks, a multiple of `align`.
uint32_t block_rows(uint32_t rows, uint32_t n_sms, uint32_t align) {
    uint32_t per = std::max(kMinBlockRows, div_up(rows, n_sms));
    per = div_up(per, align) * align;
    return std::min(per, div_up(rows, align) * align);
}

class GraphBuilder {
public:
    GraphBuilder(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target)
        : target_(target) {
        graph_.dims = dims;
        graph_.weights = weights;
        plan_inputs_ = {graph_.weights.data(), target.page_bytes, target.n_pages};
    }

    uint32_t buffer(const std::string& name, uint64_t bytes, const std::string& layout) {
        uint64_t offset = (graph_.arena_bytes + 255) / 256 * 256;  // 256-byte aligned buffers
        graph_.buffers.push_back({name, offset, bytes, layout});
        graph_.arena_bytes = offset + bytes;
        if (graph_.arena_bytes > UINT32_MAX) fail("graph: the activation arena exceeds 4 GiB");
        return uint32_t(offset);
    }

    uint32_t group(const std::string& name) {
        graph_.groups.push_back({name, 0});
        return uint32_t(graph_.groups.size() - 1);
    }

    template <typename Op, typename Args>
    void add(Opcode opcode, const Args& args, uint32_t group, std::vector<GroupDep> deps) {
        GraphNode node;
        node.ins.opcode = uint16_t(opcode);
        node.ins.seq = uint32_t(graph_.nodes.size());
        encode_args(args, node.ins);
        PagePlan plan = Op::page_plan(node.ins, plan_inputs_);
        node.ins.n_pages = uint8_t(plan.n_pages);
        node.cost = Op::cost(node.ins, graph_.dims, graph_.weights.data());
        node.group = group;
        node.deps = std::move(deps);
        graph_.groups[group].n_members++;
        graph_.nodes.push_back(std::move(node));
    }

    Graph build();

private:
    const Target& target_;
    Graph graph_;
    PlanInputs plan_inputs_;
};

Graph GraphBuilder::build() {
    const ModelDims& d = graph_.dims;
    const uint32_t n_sms = target_.n_sms;
    const uint32_t parts = std::clamp<uint32_t>(n_sms / d.n_kv_heads, 1, kMaxAttnParts);
    const uint32_t lm_rows = block_rows(d.vocab, n_sms, 1);
    const uint32_t lm_blocks = div_up(d.vocab, lm_rows);
    graph_.n_attn_parts = parts;
    graph_.n_lm_blocks = lm_blocks;

    const uint32_t x = buffer("x", 4ull * d.d_model, "(d_model) fp32 residual stream");
    const uint32_t q = buffer("q", 4ull * d.q_dim(), "(n_heads, head_dim) fp32 queries");
    const uint32_t attn_o = buffer("attn_o", 4ull * d.n_heads * parts * d.head_dim,
                                   "(n_heads, n_parts, head_dim) fp32 unnormalized partial outputs");
    const uint32_t attn_ml = buffer("attn_ml", 8ull * d.n_heads * parts, "(n_heads, n_parts, 2) fp32 max, sum");
    const uint32_t attn_out = buffer("attn_out", 4ull * d.q_dim(), "(n_heads, head_dim) fp32 attention output");
    const uint32_t act = buffer("act", 4ull * d.d_ff, "(d_ff) fp32 silu(gate) * up");
    const uint32_t logits = buffer("logits", 4ull * d.vocab, "(vocab) fp32");
    const uint32_t argmax = buffer("argmax", 8ull * lm_blocks, "(n_lm_blocks) {f32 value, i32 index}");
    const uint32_t token = buffer("token", 4, "(1) i32 sampled token");
    graph_.logits_off = logits;
    graph_.token_off = token;

    const uint32_t g_sample = group("sample");  // its one member comes last; embed waits for the previous step's
    const uint32_t g_embed = group("embed");
    add<EmbedOp>(Opcode::embed, EmbedArgs{global_weight_id(GlobalWeight::token_embedding), x, d.d_model}, g_embed,
                 {{g_sample, Operand::output, true}});

    uint32_t residual_ready = g_embed;
    const uint32_t qkv_align = d.qk_norm ? d.head_dim : 2;  // QK-norm needs whole heads; RoPE needs pairs
    for (uint32_t L = 0; L < d.n_layers; ++L) {
        auto lw = [&](LayerWeight w) { return layer_weight_id(L, w); };
        auto opt = [&](LayerWeight w) { return graph_.weights[lw(w)].present() ? lw(w) : kNoWeight; };

        const uint32_t g_qkv = group(fmt::format("qkv.L{}", L));
        const uint32_t qkv_rows = block_rows(d.q_dim() + 2 * d.kv_dim(), n_sms, qkv_align);
        for (uint32_t kind = 0; kind < 3; ++kind) {
            const uint32_t rows = kind == 0 ? d.q_dim() : d.kv_dim();
            const LayerWeight w = kind == 0 ? LayerWeight::wq : kind == 1 ? LayerWeight::wk : LayerWeight::wv;
            const LayerWeight b = kind == 0 ? LayerWeight::bq : kind == 1 ? LayerWeight::bk : LayerWeight::bv;
            const uint32_t norm = kind == 0 ? opt(LayerWeight::q_norm) : kind == 1 ? opt(LayerWeight::k_norm) : kNoWeight;
            for (uint32_t r = 0; r < rows; r += qkv_rows) {
                RmsQkvArgs a{L, kind, r, std::min(qkv_rows, rows - r), x, q, lw(w), lw(LayerWeight::attn_norm), opt(b),
                             norm, d.d_model, d.head_dim};
                add<RmsQkvOp>(Opcode::rms_qkv, a, g_qkv, {{residual_ready, Operand::input}});
            }
        }
        const uint32_t g_attn = group(fmt::format("attn.L{}", L));
        for (uint32_t h = 0; h < d.n_kv_heads; ++h)
            for (uint32_t p = 0; p < parts; ++p)
                add<AttnPartialOp>(Opcode::attn_partial,
                                   AttnPartialArgs{L, h, p, parts, q, attn_o, attn_ml, d.head_dim, d.group_size()}, g_attn,
                                   {{g_qkv, Operand::kv_cache}});
        const uint32_t g_reduce = group(fmt::format("attn_reduce.L{}", L));
        for (uint32_t h = 0; h < d.n_kv_heads; ++h)
            add<AttnReduceOp>(Opcode::attn_reduce,
                              AttnReduceArgs{L, h, parts, attn_o, attn_ml, attn_out, d.head_dim, d.group_size()}, g_reduce,
                              {{g_attn, Operand::partials}});
        const uint32_t g_o = group(fmt::format("o_proj.L{}", L));
        const uint32_t o_rows = block_rows(d.d_model, n_sms, 1);
        for (uint32_t r = 0; r < d.d_model; r += o_rows)
            add<MatvecAddOp>(Opcode::matvec_add,
                             MatvecAddArgs{lw(LayerWeight::wo), r, std::min(o_rows, d.d_model - r), d.q_dim(), attn_out, x},
                             g_o, {{g_reduce, Operand::input}});
        const uint32_t g_gate_up = group(fmt::format("gate_up.L{}", L));
        const uint32_t ff_rows = block_rows(d.d_ff, n_sms, 1);
        for (uint32_t r = 0; r < d.d_ff; r += ff_rows)
            add<RmsGateUpOp>(Opcode::rms_gate_up,
                             RmsGateUpArgs{L, r, std::min(ff_rows, d.d_ff - r), d.d_model, x, act, lw(LayerWeight::w_gate),
                                           lw(LayerWeight::w_up), lw(LayerWeight::ffn_norm)},
                             g_gate_up, {{g_o, Operand::input}});
        const uint32_t g_down = group(fmt::format("down.L{}", L));
        for (uint32_t r = 0; r < d.d_model; r += o_rows)
            add<MatvecAddOp>(Opcode::matvec_add,
                             MatvecAddArgs{lw(LayerWeight::w_down), r, std::min(o_rows, d.d_model - r), d.d_ff, act, x},
                             g_down, {{g_gate_up, Operand::input}});
        residual_ready = g_down;
    }

    const uint32_t g_lm = group("lm_head");
    for (uint32_t b = 0; b < lm_blocks; ++b) {
        const uint32_t r = b * lm_rows;
        add<RmsLmHeadOp>(Opcode::rms_lm_head,
                         RmsLmHeadArgs{r, std::min(lm_rows, d.vocab - r), b, d.d_model, x, logits, argmax,
                                       global_weight_id(GlobalWeight::lm_head),
                                       global_weight_id(GlobalWeight::output_norm)},
                         g_lm, {{residual_ready, Operand::input}});
    }
    add<SampleOp>(Opcode::sample, SampleArgs{logits, argmax, lm_blocks, d.vocab, token}, g_sample,
                  {{g_lm, Operand::logits}});
    return std::move(graph_);
}

}  // namespace

Graph build_decode_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target) {
    if (dims.n_layers == 0 || dims.d_model == 0 || dims.n_kv_heads == 0 || dims.n_heads % dims.n_kv_heads != 0)
        fail("graph: invalid model dimensions");
    if (weights.size() != n_weight_ids(dims.n_layers))
        fail("graph: {} weight formats given, the model needs {}", weights.size(), n_weight_ids(dims.n_layers));
    return GraphBuilder(dims, weights, target).build();
}

}  // namespace mk

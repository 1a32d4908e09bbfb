// Builds the decode-step graph: embed; per layer rms_qkv blocks, attention partials and reductions,
// O-projection blocks, gate/up blocks, down blocks; LM-head blocks; sample. With tensor parallelism
// every rank gets these nodes over its share of the model, the projections write partial results that
// transfers copy into every peer and reduce_add sums, and the LM-head slices are exchanged before sample.
#include "scheduler/graph.hpp"

#include <algorithm>

#include "instructions/all_ops.hpp"
#include "models/error.hpp"
#include "scheduler/graph_builder.hpp"

namespace mk {

uint64_t add_arena_buffer(Graph& graph, const std::string& name, uint64_t bytes, const std::string& layout) {
    const uint64_t offset = align_up(graph.arena_bytes, kBufferAlignBytes);
    graph.buffers.push_back({name, offset, bytes, layout});
    graph.arena_bytes = offset + bytes;
    return offset;
}

std::vector<uint32_t> replicate_rank_regions(Graph& graph, uint32_t tp) {
    graph.rank_arena_bytes = align_up(graph.arena_bytes, kBufferAlignBytes);
    if (graph.rank_arena_bytes * tp > UINT32_MAX)
        fail("graph: the activation arena of {} bytes per rank exceeds 4 GiB over {} ranks", graph.rank_arena_bytes, tp);
    const std::vector<BufferInfo> rank0 = graph.buffers;
    std::vector<uint32_t> base;
    graph.buffers.clear();
    for (uint32_t k = 0; k < tp; ++k) {
        base.push_back(uint32_t(k * graph.rank_arena_bytes));
        for (BufferInfo info : rank0) {
            info.offset += base[k];
            if (tp > 1) info.name = fmt::format("r{}.{}", k, info.name);
            graph.buffers.push_back(std::move(info));
        }
    }
    graph.arena_bytes = graph.rank_arena_bytes * tp;
    return base;
}

QkvWeights qkv_weights(const Graph& graph, uint32_t layer, uint32_t kind) {
    auto present = [&](LayerWeight w) {
        const uint32_t id = layer_weight_id(layer, w);
        return graph.weights[id].present() ? id : kNoWeight;
    };
    const ModelDims& d = graph.dims;
    if (kind == 0) return {d.q_dim(), layer_weight_id(layer, LayerWeight::wq), present(LayerWeight::bq), present(LayerWeight::q_norm)};
    if (kind == 1) return {d.kv_dim(), layer_weight_id(layer, LayerWeight::wk), present(LayerWeight::bk), present(LayerWeight::k_norm)};
    return {d.kv_dim(), layer_weight_id(layer, LayerWeight::wv), present(LayerWeight::bv), kNoWeight};
}

namespace {

// Smallest row block worth an instruction: below this the per-instruction and sync costs dominate.
constexpr uint32_t kMinBlockRows = 16;
constexpr uint32_t kMaxAttnParts = 32;
// A projection's partial result goes to the peers in this many chunks, each as soon as its blocks are
// done: more chunks overlap more of the exchange with the remaining blocks, but each costs a transfer
// instruction per peer (docs/distributed.md has the simulator's comparison).
constexpr uint32_t kTransferChunks = 4;

// One rank's activation buffers (arena byte offsets, rank 0's region plus rank * rank_arena_bytes).
struct RankBuffers {
    uint32_t x, q, attn_o, attn_ml, attn_out, act, logits, argmax, token;
    std::vector<uint32_t> recv_o, recv_down;  // by layer: (tp, d_model) fp32 partial results, tp > 1 only
};

class GraphBuilder : GraphBuilderBase {
public:
    GraphBuilder(const ModelDims& model, const std::vector<WeightFormat>& weights, const Target& target, uint32_t tp)
        : GraphBuilderBase(model, weights, target, tp) {}

    Graph build();

private:
    uint32_t buffer(const std::string& name, uint64_t bytes, const std::string& layout) {
        return uint32_t(add_arena_buffer(graph_, name, bytes, layout));  // the arena's size is checked in layout_buffers
    }
    void layout_buffers();

    // x += W . in over d_model rows on every rank (W: wo or w_down, split by columns across ranks).
    // Returns each rank's group that completes the update.
    std::vector<uint32_t> projection(uint32_t layer, const char* what, LayerWeight w, uint32_t cols,
                                     uint32_t RankBuffers::*in, std::vector<uint32_t> RankBuffers::*recv,
                                     const std::vector<uint32_t>& ready);

    std::vector<RankBuffers> ranks_;
};

void GraphBuilder::layout_buffers() {
    const ModelDims& d = graph_.dims;
    const uint32_t parts = graph_.n_attn_parts;
    RankBuffers b;
    b.x = buffer("x", 4ull * d.d_model, "(d_model) fp32 residual stream");
    b.q = buffer("q", 4ull * d.q_dim(), "(n_heads, head_dim) fp32 queries");
    b.attn_o = buffer("attn_o", 4ull * d.n_heads * parts * d.head_dim,
                      "(n_heads, n_parts, head_dim) fp32 unnormalized partial outputs");
    b.attn_ml = buffer("attn_ml", 8ull * d.n_heads * parts, "(n_heads, n_parts, 2) fp32 max, sum");
    b.attn_out = buffer("attn_out", 4ull * d.q_dim(), "(n_heads, head_dim) fp32 attention output");
    b.act = buffer("act", 4ull * d.d_ff, "(d_ff) fp32 silu(gate) * up");
    b.logits = buffer("logits", 4ull * d.vocab, "(vocab) fp32");
    b.argmax = buffer("argmax", 8ull * graph_.n_lm_blocks, "(n_lm_blocks) {f32 value, i32 index}");
    b.token = buffer("token", 4, "(1) i32 sampled token");
    if (tp_ > 1)
        for (uint32_t L = 0; L < model_.n_layers; ++L) {
            // One buffer per layer and projection: a peer may run a layer ahead, so slots are never reused in a step.
            const std::string layout = "(tp, d_model) fp32 partial results, slot k from rank k";
            b.recv_o.push_back(buffer(fmt::format("recv_o.L{}", L), 4ull * tp_ * d.d_model, layout));
            b.recv_down.push_back(buffer(fmt::format("recv_down.L{}", L), 4ull * tp_ * d.d_model, layout));
        }
    const std::vector<uint32_t> base = replicate_rank_regions(graph_, tp_);
    for (uint32_t k = 0; k < tp_; ++k) {
        RankBuffers r = b;
        for (uint32_t* f : {&r.x, &r.q, &r.attn_o, &r.attn_ml, &r.attn_out, &r.act, &r.logits, &r.argmax, &r.token})
            *f += base[k];
        for (uint32_t& f : r.recv_o) f += base[k];
        for (uint32_t& f : r.recv_down) f += base[k];
        ranks_.push_back(std::move(r));
    }
}

std::vector<uint32_t> GraphBuilder::projection(uint32_t l, const char* what, LayerWeight w, uint32_t cols,
                                               uint32_t RankBuffers::*in, std::vector<uint32_t> RankBuffers::*recv,
                                               const std::vector<uint32_t>& ready) {
    const ModelDims& d = graph_.dims;
    const uint32_t rows = block_rows(d.d_model, target_.n_sms, 1);
    std::vector<uint32_t> done(tp_);
    if (tp_ == 1) {
        done[0] = group(fmt::format("{}.L{}", what, l));
        for (uint32_t r = 0; r < d.d_model; r += rows)
            add<MatvecAddOp>(0, MatvecAddArgs{layer_weight_id(l, w), r, std::min(rows, d.d_model - r), cols,
                                           ranks_[0].*in, ranks_[0].x, 0},
                             done[0], {{ready[0], Operand::input}});
        return done;
    }
    // Chunks of whole blocks: chunk c is rows [c * chunk_rows, ...).
    const uint32_t n_blocks = div_up(d.d_model, rows);
    const uint32_t chunk_rows = div_up(n_blocks, std::min(n_blocks, kTransferChunks)) * rows;
    const uint32_t n_chunks = div_up(d.d_model, chunk_rows);
    const uint32_t slot = 4 * d.d_model;
    std::vector<std::vector<uint32_t>> part(tp_), received(tp_);
    for (uint32_t k = 0; k < tp_; ++k)
        for (uint32_t c = 0; c < n_chunks; ++c) {
            part[k].push_back(group(name(k, fmt::format("{}_part.L{}.c{}", what, l, c))));
            received[k].push_back(group(name(k, fmt::format("{}_recv.L{}.c{}", what, l, c))));
        }
    // Each rank's partial result into its own slot of its own receive buffer.
    for (uint32_t k = 0; k < tp_; ++k) {
        const uint32_t own = (ranks_[k].*recv)[l] + k * slot;
        for (uint32_t r = 0; r < d.d_model; r += rows)
            add<MatvecAddOp>(k, MatvecAddArgs{layer_weight_id(k * model_.n_layers + l, w), r,
                                           std::min(rows, d.d_model - r), cols, ranks_[k].*in, own, 1},
                             part[k][r / chunk_rows], {{ready[k], Operand::input}});
    }
    // Every finished chunk into the same slot of every peer, bumping the peer's counter for that chunk.
    for (uint32_t c = 0; c < n_chunks; ++c)
        for (uint32_t k = 0; k < tp_; ++k)
            for (uint32_t p = 0; p < tp_; ++p) {
                if (p == k) continue;
                const uint32_t r = c * chunk_rows, bytes = 4 * (std::min(d.d_model, r + chunk_rows) - r);
                const uint32_t src = (ranks_[k].*recv)[l] + k * slot + 4 * r, dst = (ranks_[p].*recv)[l] + k * slot + 4 * r;
                add<TransferOp>(k, TransferArgs{src, dst, bytes, p}, received[p][c],
                                {{part[k][c], Operand::input}});
            }
    // The sum of all ranks' partials in rank order, chunk by chunk as they arrive.
    for (uint32_t k = 0; k < tp_; ++k) {
        done[k] = group(name(k, fmt::format("{}.L{}", what, l)));
        for (uint32_t c = 0; c < n_chunks; ++c) {
            const uint32_t r = c * chunk_rows;
            add<ReduceAddOp>(k, ReduceAddArgs{ranks_[k].x, (ranks_[k].*recv)[l], slot, r,
                                           std::min(d.d_model, r + chunk_rows) - r, tp_},
                             done[k], {{part[k][c], Operand::partials}, {received[k][c], Operand::partials}});
        }
    }
    return done;
}

Graph GraphBuilder::build() {
    const ModelDims& d = graph_.dims;
    const uint32_t n_sms = target_.n_sms;
    const uint32_t parts = std::clamp<uint32_t>(n_sms / d.n_kv_heads, 1, kMaxAttnParts);
    graph_.n_attn_parts = parts;
    // The LM head: rank k's vocabulary slice in blocks; block numbers run across ranks in vocabulary order.
    std::vector<uint32_t> lm_rows(tp_), first_block(tp_ + 1, 0);
    for (uint32_t k = 0; k < tp_; ++k) {
        const uint32_t slice = tp_vocab_begin(d.vocab, tp_, k + 1) - tp_vocab_begin(d.vocab, tp_, k);
        lm_rows[k] = block_rows(slice, n_sms, 1);
        first_block[k + 1] = first_block[k] + div_up(slice, lm_rows[k]);
    }
    graph_.n_lm_blocks = first_block[tp_];
    layout_buffers();
    graph_.logits_off = ranks_[0].logits;
    graph_.token_off = ranks_[0].token;

    std::vector<uint32_t> g_sample(tp_), residual_ready(tp_);
    for (uint32_t k = 0; k < tp_; ++k) g_sample[k] = group(name(k, "sample"));  // embed waits for the previous step's
    for (uint32_t k = 0; k < tp_; ++k) {
        residual_ready[k] = group(name(k, "embed"));
        add<EmbedOp>(k, EmbedArgs{global_weight_id(GlobalWeight::token_embedding), ranks_[k].x, d.d_model},
                     residual_ready[k], {{g_sample[k], Operand::output, true}});
    }

    const uint32_t qkv_align = d.qk_norm ? d.head_dim : 2;  // QK-norm needs whole heads; RoPE needs pairs
    const uint32_t qkv_rows = block_rows(d.q_dim() + 2 * d.kv_dim(), n_sms, qkv_align);
    const uint32_t ff_rows = block_rows(d.d_ff, n_sms, 1);
    for (uint32_t l = 0; l < model_.n_layers; ++l) {
        std::vector<uint32_t> g_reduce(tp_), g_gate_up(tp_);
        for (uint32_t k = 0; k < tp_; ++k) {
            const uint32_t L = k * model_.n_layers + l;  // rank k's layer l: its weights and KV cache
            const uint32_t attn_norm = layer_weight_id(L, LayerWeight::attn_norm);
            const RankBuffers& b = ranks_[k];
            const uint32_t g_qkv = group(name(k, fmt::format("qkv.L{}", l)));
            for (uint32_t kind = 0; kind < 3; ++kind) {
                const QkvWeights w = qkv_weights(graph_, L, kind);
                // A bf16 cache's K/V blocks are finished in the device scratch: kMaxStagedKvRows at most.
                const uint32_t block = kind != 0 && d.kv_type == uint32_t(KvType::bf16)
                                           ? std::min(qkv_rows, kMaxStagedKvRows / qkv_align * qkv_align)
                                           : qkv_rows;
                for (uint32_t r = 0; r < w.rows; r += block) {
                    RmsQkvArgs a{L, kind, r, std::min(block, w.rows - r), b.x, b.q, w.matrix, attn_norm,
                                 w.bias, w.norm, d.d_model, d.head_dim};
                    add<RmsQkvOp>(k, a, g_qkv, {{residual_ready[k], Operand::input}});
                }
            }
            const uint32_t g_attn = group(name(k, fmt::format("attn.L{}", l)));
            for (uint32_t h = 0; h < d.n_kv_heads; ++h)
                for (uint32_t p = 0; p < parts; ++p)
                    add<AttnPartialOp>(k, AttnPartialArgs{L, h, p, parts, b.q, b.attn_o, b.attn_ml, d.head_dim, d.group_size()},
                                       g_attn, {{g_qkv, Operand::kv_cache}});
            g_reduce[k] = group(name(k, fmt::format("attn_reduce.L{}", l)));
            for (uint32_t h = 0; h < d.n_kv_heads; ++h)
                add<AttnReduceOp>(k, AttnReduceArgs{L, h, parts, b.attn_o, b.attn_ml, b.attn_out, d.head_dim, d.group_size()},
                                  g_reduce[k], {{g_attn, Operand::partials}});
        }
        const std::vector<uint32_t> g_o =
            projection(l, "o_proj", LayerWeight::wo, d.q_dim(), &RankBuffers::attn_out, &RankBuffers::recv_o, g_reduce);
        for (uint32_t k = 0; k < tp_; ++k) {
            const uint32_t L = k * model_.n_layers + l;
            auto lw = [&](LayerWeight w) { return layer_weight_id(L, w); };
            g_gate_up[k] = group(name(k, fmt::format("gate_up.L{}", l)));
            for (uint32_t r = 0; r < d.d_ff; r += ff_rows)
                add<RmsGateUpOp>(k, RmsGateUpArgs{L, r, std::min(ff_rows, d.d_ff - r), d.d_model, ranks_[k].x, ranks_[k].act,
                                               lw(LayerWeight::w_gate), lw(LayerWeight::w_up), lw(LayerWeight::ffn_norm)},
                                 g_gate_up[k], {{g_o[k], Operand::input}});
        }
        residual_ready =
            projection(l, "down", LayerWeight::w_down, d.d_ff, &RankBuffers::act, &RankBuffers::recv_down, g_gate_up);
    }

    std::vector<uint32_t> g_lm(tp_), g_lm_recv(tp_);
    for (uint32_t k = 0; k < tp_; ++k) {
        g_lm[k] = group(name(k, "lm_head"));
        const RankBuffers& b = ranks_[k];
        const uint32_t begin = tp_vocab_begin(d.vocab, tp_, k), end = tp_vocab_begin(d.vocab, tp_, k + 1);
        for (uint32_t r = begin, block = first_block[k]; r < end; r += lm_rows[k], ++block)
            add<RmsLmHeadOp>(k, RmsLmHeadArgs{r, std::min(lm_rows[k], end - r), block, d.d_model, b.x, b.logits, b.argmax,
                                           global_weight_id(GlobalWeight::lm_head),
                                           global_weight_id(GlobalWeight::output_norm)},
                             g_lm[k], {{residual_ready[k], Operand::input}});
    }
    if (tp_ > 1) {
        // Each rank's logits slice and block argmaxes to every peer: every rank then samples the same token.
        for (uint32_t k = 0; k < tp_; ++k) g_lm_recv[k] = group(name(k, "lm_recv"));
        for (uint32_t k = 0; k < tp_; ++k) {
            const uint32_t begin = tp_vocab_begin(d.vocab, tp_, k), end = tp_vocab_begin(d.vocab, tp_, k + 1);
            for (uint32_t p = 0; p < tp_; ++p) {
                if (p == k) continue;
                add<TransferOp>(k, TransferArgs{ranks_[k].logits + 4 * begin, ranks_[p].logits + 4 * begin, 4 * (end - begin), p},
                                g_lm_recv[p], {{g_lm[k], Operand::input}});
                const uint32_t blocks = first_block[k + 1] - first_block[k];
                add<TransferOp>(k, TransferArgs{ranks_[k].argmax + 8 * first_block[k], ranks_[p].argmax + 8 * first_block[k],
                                             8 * blocks, p},
                                g_lm_recv[p], {{g_lm[k], Operand::input}});
            }
        }
    }
    for (uint32_t k = 0; k < tp_; ++k) {
        std::vector<GroupDep> deps{{g_lm[k], Operand::logits}};
        if (tp_ > 1) deps.push_back({g_lm_recv[k], Operand::logits});
        add<SampleOp>(k, SampleArgs{ranks_[k].logits, ranks_[k].argmax, graph_.n_lm_blocks, d.vocab, ranks_[k].token},
                      g_sample[k], std::move(deps));
    }
    return std::move(graph_);
}

}  // namespace

uint32_t block_rows(uint32_t rows, uint32_t n_sms, uint32_t align) {
    uint32_t per = std::max(kMinBlockRows, div_up(rows, n_sms));
    per = div_up(per, align) * align;
    return std::min(per, div_up(rows, align) * align);
}

Graph build_decode_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target,
                         uint32_t tp) {
    if (dims.n_layers == 0 || dims.d_model == 0 || dims.n_kv_heads == 0 || dims.n_heads % dims.n_kv_heads != 0)
        fail("graph: invalid model dimensions");
    if (tp == 0 || dims.n_kv_heads % tp != 0 || dims.d_ff % tp != 0)
        fail("graph: {} KV heads and FFN width {} do not split {} ways", dims.n_kv_heads, dims.d_ff, tp);
    const uint32_t n_ids = n_weight_ids(dims.n_layers * tp);
    if (weights.size() != n_ids)
        fail("graph: {} weight formats given, the model needs {}", weights.size(), n_ids);
    return GraphBuilder(dims, weights, target, tp).build();
}

}  // namespace mk

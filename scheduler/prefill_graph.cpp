// Builds the prefill-step graph: a chunk of up to T tokens through every layer at once. embed_rows; per layer
// rms_qkv_rows tiles (K/V for their tokens' positions), attn_rows (a KV head x a block of queries), matmul_add
// O tiles, rms_gate_up_rows tiles, matmul_add down tiles; rms_lm_head_rows blocks. A tile is a row block x a token
// block (gemm_tiling); each weight row is read once per token block. Where only the last token's logits are wanted,
// the last layer's projections after attention run for that token alone (last_token_layer). The host writes the
// tokens (into every rank's region) and samples from the last token's logits (no sample op). With tensor
// parallelism every rank runs these over its share of the model, as in the decode graph (graph.cpp): the
// projections' (T, d_model) partial results go to every peer and reduce_add sums them in rank order; the LM-head
// slices go to rank 0, whose logits the host reads.
#include <algorithm>
#include <functional>
#include <numeric>

#include "instructions/all_ops.hpp"
#include "instructions/common/page_plan.hpp"
#include "models/error.hpp"
#include "scheduler/graph_builder.hpp"

namespace mk {

namespace {

// A projection's partial results reach each peer in this many transfers (whole tokens each), so the copy of a
// (T, d_model) slot is spread over SMs instead of one instruction moving all T rows.
constexpr uint32_t kTransferPieces = 4;

// The rows a projection's row blocks come in multiples of for its MMA tiles (page_plan.hpp's mma_row_align: 1 but for
// rows that are neither whole spans nor padded to 16 bytes, whose tiles are then one aligned copy each).
uint32_t mma_rows(const PlanInputs& in, uint32_t weight) { return in.tensor_cores ? mma_row_align(in.weights[weight]) : 1; }

// How a projection of M output rows over a chunk of T tokens splits into (row block x token block) instructions,
// as a GEMM splits into tiles.
struct GemmTiling {
    uint32_t rows;    // rows per block (the last may be shorter)
    uint32_t tokens;  // tokens per block: a multiple of token_block_align, or the whole chunk T
};

// The tokens a block's count is a multiple of. The CPU's tile kernels take tokens 16 at a time (AVX2 and VNNI
// passes): a block that is not a multiple of 16 would leave a partial pass in every instruction instead of only in
// the chunk's tail. MMA tiles take them 8 at a time (mma.m16n8k16's n, a warp's chunk): 16 would allow 32 or 48 but
// not 56, the most a pass of 128 rows holds (kMmaTeamWarps chunks: token_rows.hpp). By target: a GPU target's plans
// stream tensor-core formats in MMA tiles (PlanInputs::tensor_cores); the others' blocks take 8 alike.
uint32_t token_block_align(const PlanInputs& in) { return in.tensor_cores ? kMmaMinTokens : 16; }

// The tiling whose SMs move the fewest bytes. Mb row blocks each read every token's input once (Mb * T *
// token_bytes, token_bytes = a token's K fp32 inputs) and Nb token blocks each read every weight row once
// (Nb * M * row_bytes); the Mb * Nb instructions run in waves of n_sms, so the step waits for
// waves * (one instruction's bytes): that is minimised, then the bytes in all. Row blocks alone (Nb = 1), as
// before, made activations the whole cost on a GPU: Llama-3.2-1B's shape in BF16, T = 512, on 132 SMs moved
// 60 GB a chunk, 58 of them activations. Per layer (instructions, bytes: activations + weights):
//   qkv (M 3072, K 2048)     130 x 1  532 MiB -> 18 x 7 (172 rows x 80 tokens)   156 MiB
//   o (M 2048, K 2048)       128 x 1  520 MiB -> 16 x 8 (128 x 64)               128 MiB
//   gate_up (M 8192 x 2)     131 x 1  588 MiB -> 44 x 3 (187 x 176)              368 MiB
//   down (M 2048, K 8192)    128 x 1 2080 MiB -> 16 x 8 (128 x 64)               512 MiB
// 60 -> 19 GB a chunk. The CPU target (8 virtual SMs, T = 256, quantized weights) keeps 1 to 4 token blocks of
// 64 to 256 tokens: SmolLM2-135M Q4_1 o_proj 8 x 1 -> 2 x 4, Llama-3.2-1B Q8_0 gate_up stays 8 x 1.
// `kinds`: the row counts of projections that share the tiling (Q, K and V), a block never spanning two. Where the
// weights stream in MMA tiles (BF16, F16, Q8_0, Q4_0, Q4_1 on a GPU target), a block reads its tokens' inputs once per pass of its rows
// (`read_rows(tokens)` rows: page_plan.hpp's rows_per_input_read), not once: 128-row passes for up to 56 tokens,
// 64 up to 112, none beyond (scalar dots read the inputs once a row): Llama-3.2-1B's gate_up in BF16 on the H200
// target went from 187 rows x 176 tokens to 679 x 32, qkv from 172 x 80 to 256 x 32. `norm_reads`: the inputs'
// further reads an instruction makes (rms_* ops: the RMS scales' pass), which favour fewer, taller row blocks; with
// them and blocks of 8 tokens, that gate_up is 631 x 56 (683 x 48 before: 41.3 -> 40.1 GB from L2 a chunk).
GemmTiling gemm_tiling(const std::vector<uint32_t>& kinds, uint32_t align, uint32_t token_align, uint64_t row_bytes,
                       uint64_t token_bytes, uint32_t norm_reads, uint32_t T, uint32_t n_sms,
                       const std::function<uint32_t(uint32_t)>& read_rows) {
    uint32_t M = 0;
    for (uint32_t rows : kinds) M += rows;
    GemmTiling best{block_rows(M, n_sms, align), T};
    uint64_t best_time = UINT64_MAX, best_bytes = UINT64_MAX;
    uint32_t last_tokens = 0;
    for (uint32_t split = 1; split <= std::max(1u, div_up(T, token_align)); ++split) {
        const uint32_t tokens = std::min(T, div_up(div_up(T, split), token_align) * token_align);
        if (tokens == last_tokens) continue;
        last_tokens = tokens;
        const uint32_t nb = div_up(T, tokens), pass_rows = read_rows(tokens);
        uint32_t last_rows = 0;
        for (uint32_t want = 1; want <= div_up(M, align); ++want) {
            const uint32_t rows = block_rows(M, want, align);
            if (rows == last_rows) continue;
            last_rows = rows;
            uint64_t mb = 0;
            for (uint32_t k : kinds) mb += div_up(k, rows);
            const uint64_t reads = div_up(rows, std::min(rows, pass_rows));  // per instruction
            const uint64_t waves = div_up(uint32_t(mb * nb), n_sms);
            const uint64_t time = waves * ((reads + norm_reads) * tokens * token_bytes + rows * row_bytes);
            const uint64_t bytes = mb * (reads + norm_reads) * T * token_bytes + uint64_t(nb) * M * row_bytes;
            if (time < best_time || (time == best_time && bytes < best_bytes))
                best_time = time, best_bytes = bytes, best = {rows, tokens};
        }
    }
    return best;
}

// One rank's activation buffers (arena byte offsets, rank 0's region plus rank * rank_arena_bytes).
struct PrefillBuffers {
    uint32_t tokens, x, q, attn_out, act, logits;
    std::vector<uint32_t> recv_o, recv_down;  // by layer: (tp, T, d_model) fp32 partial results, tp > 1 only
    uint32_t x_last = 0, attn_last = 0, act_last = 0;  // the last token's rows, where it runs alone (last_token_only)
};

class PrefillBuilder : GraphBuilderBase {
public:
    PrefillBuilder(const ModelDims& model, const std::vector<WeightFormat>& weights, const Target& target,
                   uint32_t n_tok, bool all_logits, uint32_t tp)
        : GraphBuilderBase(model, weights, target, tp), n_tok_(n_tok), all_logits_(all_logits) {
        graph_.prefill_tokens = n_tok;
        graph_.all_logits = all_logits ? 1 : 0;
    }

    Graph build();

private:
    // Where only the last token's logits are wanted, the last layer runs its projections after attention for that
    // token alone: nothing reads the other tokens' results of them (the next chunk's embedding overwrites the
    // residual streams; its attention reads the KV cache, written before). Its residual stream and attention output
    // are copied out (last_token_row: which token is the last is known at run time only) and o, gate_up, down and
    // the LM head run on those copies as a chunk of one token. Llama-3.2-1B's shape, T = 512 on the H200 target:
    // 8.29 -> 7.9 ms (o 38, gate_up 250 and down 145 us instructions, a wave each, became 4, 27 and 14). One rank
    // only: the exchanges move whole (T, d_model) slots.
    bool last_token_only() const { return !all_logits_ && tp_ == 1; }
    uint32_t buffer(const std::string& name, uint64_t bytes, const std::string& layout) {
        const uint64_t offset = add_arena_buffer(graph_, name, bytes, layout);
        if (graph_.arena_bytes > UINT32_MAX) fail("prefill graph: the activation arena exceeds 4 GiB; use a smaller chunk");
        return uint32_t(offset);
    }
    void layout_buffers();
    // x[j] += W . in[j] for the chunk on every rank, in row blocks (W: wo or w_down, split by columns across
    // ranks); returns each rank's group that completes the update.
    std::vector<uint32_t> projection(uint32_t layer, const char* what, LayerWeight w, uint32_t cols,
                                     uint32_t PrefillBuffers::*in, std::vector<uint32_t> PrefillBuffers::*recv,
                                     const std::vector<uint32_t>& ready);
    // The last layer after attention for the last token alone (last_token_only); returns the group the LM head waits
    // for.
    uint32_t last_token_layer(uint32_t attn_done);
    // gemm_tiling for this chunk and target: `kinds` rows of `weights` (those one instruction streams together).
    GemmTiling tiling(const std::vector<uint32_t>& kinds, uint32_t align, std::initializer_list<uint32_t> weights,
                      uint64_t row_bytes, uint64_t token_bytes, bool normed) const {
        // The scales' pass only on targets whose plans use tensor cores: the CPU target's tilings are the ones measured
        // against llama.cpp (bench/RESULTS.md); counted there, SmolLM2's gate_up at T = 64 went 192 x 64 -> 384 x 32.
        const uint32_t norm_reads = normed && plan_inputs_.tensor_cores ? 1 : 0;
        return gemm_tiling(kinds, align, token_block_align(plan_inputs_), row_bytes, token_bytes, norm_reads,
                           n_tok_, target_.n_sms,
                           [&](uint32_t tokens) { return rows_per_input_read(plan_inputs_, weights, tokens); });
    }

    const uint32_t n_tok_;
    const bool all_logits_;
    std::vector<PrefillBuffers> ranks_;
};

void PrefillBuilder::layout_buffers() {
    const ModelDims& d = graph_.dims;
    const uint64_t T = n_tok_;
    PrefillBuffers b;
    b.tokens = buffer("tokens", 4 * T, "(T) i32 the chunk's tokens (written by the host)");
    b.x = buffer("x", 4 * T * d.d_model, "(T, d_model) fp32 residual streams");
    b.q = buffer("q", 4 * T * d.q_dim(), "(T, n_heads, head_dim) fp32 queries");
    b.attn_out = buffer("attn_out", 4 * T * d.q_dim(), "(T, n_heads, head_dim) fp32 attention outputs");
    b.act = buffer("act", 4 * T * d.d_ff, "(T, d_ff) fp32 silu(gate) * up");
    b.logits = buffer("logits", 4ull * (all_logits_ ? T : 1) * d.vocab,
                      all_logits_ ? "(T, vocab) fp32" : "(vocab) fp32 of the chunk's last token");
    if (last_token_only()) {
        b.x_last = buffer("x_last", 4ull * d.d_model, "(d_model) fp32 the last token's residual stream, last layer");
        b.attn_last = buffer("attn_last", 4ull * d.q_dim(), "(n_heads, head_dim) fp32 its attention output");
        b.act_last = buffer("act_last", 4ull * d.d_ff, "(d_ff) fp32 its silu(gate) * up");
    }
    if (tp_ > 1)
        for (uint32_t L = 0; L < model_.n_layers; ++L) {
            // One buffer per layer and projection: a peer may run a layer ahead, so slots are never reused in a step.
            const std::string layout = "(tp, T, d_model) fp32 partial results, slot k from rank k";
            b.recv_o.push_back(buffer(fmt::format("recv_o.L{}", L), 4 * tp_ * T * d.d_model, layout));
            b.recv_down.push_back(buffer(fmt::format("recv_down.L{}", L), 4 * tp_ * T * d.d_model, layout));
        }
    const std::vector<uint32_t> base = replicate_rank_regions(graph_, tp_);
    for (uint32_t k = 0; k < tp_; ++k) {
        PrefillBuffers r = b;
        for (uint32_t* f : {&r.tokens, &r.x, &r.q, &r.attn_out, &r.act, &r.logits, &r.x_last, &r.attn_last, &r.act_last})
            *f += base[k];
        for (uint32_t& f : r.recv_o) f += base[k];
        for (uint32_t& f : r.recv_down) f += base[k];
        ranks_.push_back(std::move(r));
    }
}

std::vector<uint32_t> PrefillBuilder::projection(uint32_t l, const char* what, LayerWeight w, uint32_t cols,
                                                 uint32_t PrefillBuffers::*in,
                                                 std::vector<uint32_t> PrefillBuffers::*recv,
                                                 const std::vector<uint32_t>& ready) {
    const ModelDims& d = graph_.dims;
    const uint32_t T = n_tok_;
    const uint32_t id = layer_weight_id(l, w);
    const GemmTiling t =
        tiling({d.d_model}, mma_rows(plan_inputs_, id), {id}, graph_.weights[id].row_bytes, 4ull * cols, false);
    std::vector<uint32_t> done(tp_);
    if (tp_ == 1) {
        done[0] = group(fmt::format("{}.L{}", what, l));
        for (uint32_t r = 0; r < d.d_model; r += t.rows)
            for (uint32_t j = 0; j < T; j += t.tokens)
                add<MatmulAddOp>(0, MatmulAddArgs{layer_weight_id(l, w), r, std::min(t.rows, d.d_model - r), cols,
                                                  ranks_[0].*in, ranks_[0].x, d.d_model, T, 0, j, std::min(t.tokens, T - j)},
                                 done[0], {{ready[0], Operand::input}});
        return done;
    }
    // Rank k's partial results into slot k of its own receive buffer, then that slot into every peer's in
    // pieces of whole tokens, then every rank sums slots 0..tp-1 in rank order (the same bits on every rank).
    const uint32_t slot = 4 * T * d.d_model, piece_tok = div_up(T, std::min(T, kTransferPieces));
    const uint32_t sum_tok = div_up(T, std::min(T, target_.n_sms));
    std::vector<uint32_t> part(tp_), received(tp_);
    for (uint32_t k = 0; k < tp_; ++k) {
        part[k] = group(name(k, fmt::format("{}_part.L{}", what, l)));
        received[k] = group(name(k, fmt::format("{}_recv.L{}", what, l)));
    }
    for (uint32_t k = 0; k < tp_; ++k) {
        const uint32_t own = (ranks_[k].*recv)[l] + k * slot;
        for (uint32_t r = 0; r < d.d_model; r += t.rows)
            for (uint32_t j = 0; j < T; j += t.tokens)
                add<MatmulAddOp>(k, MatmulAddArgs{layer_weight_id(k * model_.n_layers + l, w), r,
                                                  std::min(t.rows, d.d_model - r), cols, ranks_[k].*in, own, d.d_model,
                                                  T, 1, j, std::min(t.tokens, T - j)},
                                 part[k], {{ready[k], Operand::input}});
    }
    for (uint32_t k = 0; k < tp_; ++k)
        for (uint32_t p = 0; p < tp_; ++p)
            for (uint32_t j = 0; j < T && p != k; j += piece_tok) {
                const uint32_t at = k * slot + 4 * j * d.d_model, bytes = 4 * std::min(piece_tok, T - j) * d.d_model;
                add<TransferOp>(k, TransferArgs{(ranks_[k].*recv)[l] + at, (ranks_[p].*recv)[l] + at, bytes, p},
                                received[p], {{part[k], Operand::input}});
            }
    for (uint32_t k = 0; k < tp_; ++k) {
        done[k] = group(name(k, fmt::format("{}.L{}", what, l)));
        // (T, d_model) as one flat vector: reduce_add's rows are its elements.
        for (uint32_t j = 0; j < T; j += sum_tok)
            add<ReduceAddOp>(k, ReduceAddArgs{ranks_[k].x, (ranks_[k].*recv)[l], slot, j * d.d_model,
                                              std::min(sum_tok, T - j) * d.d_model, tp_},
                             done[k], {{part[k], Operand::partials}, {received[k], Operand::partials}});
    }
    return done;
}

uint32_t PrefillBuilder::last_token_layer(uint32_t attn_done) {
    const ModelDims& d = graph_.dims;
    const PrefillBuffers& b = ranks_[0];
    const uint32_t l = model_.n_layers - 1, n_sms = target_.n_sms;
    auto lw = [&](LayerWeight w) { return layer_weight_id(l, w); };
    // Row blocks over the SMs, as decode's matvecs (one token: whole-row dots, no MMA tiles).
    auto rows = [&](uint32_t M, uint32_t weight) { return block_rows(M, n_sms, mma_rows(plan_inputs_, weight)); };
    const uint32_t copied = group(fmt::format("last_token.L{}", l));
    add<LastTokenRowOp>(0, LastTokenRowArgs{b.x, b.x_last, d.d_model, n_tok_}, copied, {{attn_done, Operand::input}});
    add<LastTokenRowOp>(0, LastTokenRowArgs{b.attn_out, b.attn_last, d.q_dim(), n_tok_}, copied,
                        {{attn_done, Operand::input}});
    auto matmul = [&](const char* what, LayerWeight w, uint32_t cols, uint32_t in, uint32_t ready) {
        const uint32_t done = group(fmt::format("{}.L{}", what, l)), step = rows(d.d_model, lw(w));
        for (uint32_t r = 0; r < d.d_model; r += step)
            add<MatmulAddOp>(0, MatmulAddArgs{lw(w), r, std::min(step, d.d_model - r), cols, in, b.x_last, d.d_model, 1, 0},
                             done, {{ready, Operand::input}});
        return done;
    };
    const uint32_t o = matmul("o_proj", LayerWeight::wo, d.q_dim(), b.attn_last, copied);
    const uint32_t gate_up = group(fmt::format("gate_up.L{}", l)), step = rows(d.d_ff, lw(LayerWeight::w_gate));
    for (uint32_t r = 0; r < d.d_ff; r += step)
        add<RmsGateUpRowsOp>(0, RmsGateUpRowsArgs{l, r, std::min(step, d.d_ff - r), d.d_model, b.x_last, b.act_last,
                                                  lw(LayerWeight::w_gate), lw(LayerWeight::w_up),
                                                  lw(LayerWeight::ffn_norm), d.d_ff, 1},
                             gate_up, {{o, Operand::input}});
    return matmul("down", LayerWeight::w_down, d.d_ff, b.act_last, gate_up);
}

Graph PrefillBuilder::build() {
    const ModelDims& d = graph_.dims;
    const uint32_t T = n_tok_, n_sms = target_.n_sms;
    layout_buffers();
    graph_.tokens_off = ranks_[0].tokens;
    graph_.logits_off = ranks_[0].logits;
    graph_.token_off = kNoOffset;  // the host samples

    // The next chunk's embed overwrites x, which this chunk's LM head reads; on rank 0 the peers' LM-head
    // slices of this chunk must have landed before its next chunk starts (so they do before theirs).
    std::vector<uint32_t> g_lm(tp_), g_lm_recv(tp_), ready(tp_);
    for (uint32_t k = 0; k < tp_; ++k) g_lm[k] = group(name(k, "lm_head"));
    if (tp_ > 1) g_lm_recv[0] = group(name(0, "lm_recv"));
    // The embedding in token blocks over the SMs (one instruction embedding the whole chunk kept the rest waiting).
    const uint32_t embed_tokens = div_up(T, std::min(T, n_sms));
    for (uint32_t k = 0; k < tp_; ++k) {
        ready[k] = group(name(k, "embed"));
        std::vector<GroupDep> deps{{g_lm[k], Operand::output, true}};
        if (k == 0 && tp_ > 1) deps.push_back({g_lm_recv[0], Operand::output, true});
        for (uint32_t j = 0; j < T; j += embed_tokens)
            add<EmbedRowsOp>(k, EmbedRowsArgs{global_weight_id(GlobalWeight::token_embedding), ranks_[k].tokens,
                                              ranks_[k].x, d.d_model, T, j, std::min(embed_tokens, T - j)},
                             ready[k], deps);
    }

    const uint32_t qkv_align = d.qk_norm ? d.head_dim : 2;  // QK-norm needs whole heads; RoPE needs pairs
    const uint64_t q_row_bytes = graph_.weights[layer_weight_id(0, LayerWeight::wq)].row_bytes;
    const uint64_t gate_up_row_bytes = 2 * graph_.weights[layer_weight_id(0, LayerWeight::w_gate)].row_bytes;
    const uint32_t wq = layer_weight_id(0, LayerWeight::wq), gate = layer_weight_id(0, LayerWeight::w_gate),
                   up = layer_weight_id(0, LayerWeight::w_up);
    const GemmTiling qkv = tiling({d.q_dim(), d.kv_dim(), d.kv_dim()}, std::lcm(qkv_align, mma_rows(plan_inputs_, wq)),
                                  {wq}, q_row_bytes, 4ull * d.d_model, true);
    const GemmTiling ff =
        tiling({d.d_ff}, mma_rows(plan_inputs_, gate), {gate, up}, gate_up_row_bytes, 4ull * d.d_model, true);
    // Query blocks: enough instructions for the SMs. Causal work grows with a query's index, so each instruction
    // takes an early block and the matching late one: the chunk cut in `pieces`, piece i with piece pieces - 1 - i.
    // Equal blocks alone left the last one twice the average (at position 0; Llama-3.2-1B's shape, T = 512 on 132
    // SMs: queries [480, 512) over ~500 positions where [0, 32) read ~16), and a layer's attention waits for it.
    const uint32_t q_parts = std::clamp<uint32_t>(n_sms / d.n_kv_heads, 1, std::max(1u, T / 2));
    const uint32_t pieces = std::min(T, 2 * q_parts);
    auto piece = [&](uint32_t i) { return uint32_t(uint64_t(T) * i / pieces); };  // where piece i begins
    for (uint32_t l = 0; l < model_.n_layers; ++l) {
        std::vector<uint32_t> g_attn(tp_), g_gate_up(tp_);
        for (uint32_t k = 0; k < tp_; ++k) {
            const uint32_t L = k * model_.n_layers + l;  // rank k's layer l: its weights and KV cache
            const PrefillBuffers& b = ranks_[k];
            const uint32_t g_qkv = group(name(k, fmt::format("qkv.L{}", l)));
            for (uint32_t kind = 0; kind < 3; ++kind) {
                const QkvWeights w = qkv_weights(graph_, L, kind);
                for (uint32_t r = 0; r < w.rows; r += qkv.rows)
                    for (uint32_t j = 0; j < T; j += qkv.tokens)
                        add<RmsQkvRowsOp>(k, RmsQkvRowsArgs{L, kind, r, std::min(qkv.rows, w.rows - r), b.x, b.q,
                                                            w.matrix, layer_weight_id(L, LayerWeight::attn_norm), w.bias,
                                                            w.norm, d.d_model, d.head_dim, T, j,
                                                            std::min(qkv.tokens, T - j)},
                                          g_qkv, {{ready[k], Operand::input}});
            }
            g_attn[k] = group(name(k, fmt::format("attn.L{}", l)));
            for (uint32_t h = 0; h < d.n_kv_heads; ++h)
                for (uint32_t i = 0; i < q_parts; ++i) {
                    const uint32_t late = pieces - 1 - i;  // none where it is piece i itself (or an earlier one)
                    const uint32_t q2 = late > i ? piece(late) : 0, n_q2 = late > i ? piece(late + 1) - piece(late) : 0;
                    add<AttnRowsOp>(k, AttnRowsArgs{L, h, piece(i), piece(i + 1) - piece(i), b.q, b.attn_out, d.head_dim,
                                                    d.group_size(), T, q2, n_q2},
                                    g_attn[k], {{g_qkv, Operand::kv_cache}});
                }
        }
        if (l + 1 == model_.n_layers && last_token_only()) {
            ready = {last_token_layer(g_attn[0])};
            break;
        }
        const std::vector<uint32_t> g_o = projection(l, "o_proj", LayerWeight::wo, d.q_dim(), &PrefillBuffers::attn_out,
                                                     &PrefillBuffers::recv_o, g_attn);
        for (uint32_t k = 0; k < tp_; ++k) {
            const uint32_t L = k * model_.n_layers + l;
            auto lw = [&](LayerWeight w) { return layer_weight_id(L, w); };
            g_gate_up[k] = group(name(k, fmt::format("gate_up.L{}", l)));
            for (uint32_t r = 0; r < d.d_ff; r += ff.rows)
                for (uint32_t j = 0; j < T; j += ff.tokens)
                    add<RmsGateUpRowsOp>(k, RmsGateUpRowsArgs{L, r, std::min(ff.rows, d.d_ff - r), d.d_model,
                                                              ranks_[k].x, ranks_[k].act, lw(LayerWeight::w_gate),
                                                              lw(LayerWeight::w_up), lw(LayerWeight::ffn_norm), d.d_ff,
                                                              T, j, std::min(ff.tokens, T - j)},
                                         g_gate_up[k], {{g_o[k], Operand::input}});
        }
        ready = projection(l, "down", LayerWeight::w_down, d.d_ff, &PrefillBuffers::act, &PrefillBuffers::recv_down,
                           g_gate_up);
    }
    // The LM head: rank k's vocabulary slice (the whole vocabulary without tensor parallelism) in row blocks over the
    // SMs for the last token's logits; for every token's, row blocks x token blocks as the projections (one block of
    // all T tokens took scalar dots on the device, each row re-reading every token's input: 98 of 106 ms for
    // Llama-3.2-1B's shape, T = 512 on the h200 target).
    const uint32_t n_rows = all_logits_ ? T : 1;  // of logits
    const uint32_t lm_head = global_weight_id(GlobalWeight::lm_head);
    graph_.n_lm_blocks = 0;
    for (uint32_t k = 0; k < tp_; ++k) {
        const uint32_t begin = tp_vocab_begin(d.vocab, tp_, k), end = tp_vocab_begin(d.vocab, tp_, k + 1);
        const GemmTiling t = all_logits_ ? tiling({end - begin}, mma_rows(plan_inputs_, lm_head), {lm_head},
                                                  graph_.weights[lm_head].row_bytes, 4ull * d.d_model, true)
                                         : GemmTiling{block_rows(end - begin, n_sms, mma_rows(plan_inputs_, lm_head)), T};
        graph_.n_lm_blocks += div_up(end - begin, t.rows);
        for (uint32_t r = begin; r < end; r += t.rows)
            for (uint32_t j = 0; j < (all_logits_ ? T : 1); j += t.tokens)
                add<RmsLmHeadRowsOp>(k, RmsLmHeadRowsArgs{r, std::min(t.rows, end - r), d.d_model,
                                                          last_token_only() ? ranks_[k].x_last : ranks_[k].x,
                                                          ranks_[k].logits, lm_head,
                                                          global_weight_id(GlobalWeight::output_norm), d.vocab,
                                                          last_token_only() ? 1 : T, all_logits_, j,
                                                          all_logits_ ? std::min(t.tokens, T - j) : 0},
                                     g_lm[k], {{ready[k], Operand::input}});
        // A peer's vocabulary slice of every logits row into rank 0's.
        for (uint32_t j = 0; j < n_rows && k > 0; ++j) {
            const uint32_t at = 4 * (j * d.vocab + begin);
            add<TransferOp>(k, TransferArgs{ranks_[k].logits + at, ranks_[0].logits + at, 4 * (end - begin), 0},
                            g_lm_recv[0], {{g_lm[k], Operand::input}});
        }
    }
    return std::move(graph_);
}

}  // namespace

Graph build_prefill_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target,
                          uint32_t n_tok, bool all_logits, uint32_t tp) {
    if (dims.n_layers == 0 || dims.d_model == 0 || dims.n_kv_heads == 0 || dims.n_heads % dims.n_kv_heads != 0)
        fail("prefill graph: invalid model dimensions");
    if (n_tok == 0 || n_tok > 4096) fail("prefill graph: a chunk of {} tokens (1 to 4096)", n_tok);
    if (tp == 0 || dims.n_kv_heads % tp != 0 || dims.d_ff % tp != 0)
        fail("prefill graph: {} KV heads and FFN width {} do not split {} ways", dims.n_kv_heads, dims.d_ff, tp);
    const uint32_t n_ids = n_weight_ids(dims.n_layers * tp);
    if (weights.size() != n_ids) fail("prefill graph: {} weight formats given, the model needs {}", weights.size(), n_ids);
    return PrefillBuilder(dims, weights, target, n_tok, all_logits, tp).build();
}

}  // namespace mk

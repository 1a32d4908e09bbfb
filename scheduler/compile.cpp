// compile_schedule: graph -> assignment -> counters.
#include "scheduler/compile.hpp"

#include "models/error.hpp"
#include "models/quant.hpp"
#include "scheduler/counters.hpp"
#include "scheduler/graph.hpp"

namespace mk {

ModelDims model_dims(const ModelConfig& c) {
    ModelDims d;
    d.n_layers = uint32_t(c.n_layers);
    d.d_model = uint32_t(c.d_model);
    d.n_heads = uint32_t(c.n_heads);
    d.n_kv_heads = uint32_t(c.n_kv_heads);
    d.head_dim = uint32_t(c.head_dim);
    d.d_ff = uint32_t(c.d_ff);
    d.vocab = uint32_t(c.vocab_size);
    d.norm_eps = c.norm_eps;
    d.qkv_bias = c.qkv_bias;
    d.qk_norm = c.qk_norm;
    return d;
}

namespace {
WeightFormat format_of(const TensorView& t) {
    if (!t.data) return {};
    WeightFormat f;
    f.dtype = uint32_t(t.dtype);
    f.rows = uint32_t(t.shape.size() == 1 ? 1 : t.n_rows());
    f.cols = uint32_t(t.row_length());
    f.row_bytes = row_bytes(t.dtype, t.row_length());
    return f;
}
}  // namespace

std::vector<const TensorView*> weight_views(const Model& model) {
    const uint32_t n_layers = uint32_t(model.config.n_layers);
    std::vector<const TensorView*> out(n_weight_ids(n_layers), nullptr);
    out[global_weight_id(GlobalWeight::token_embedding)] = &model.token_embedding;
    out[global_weight_id(GlobalWeight::output_norm)] = &model.output_norm;
    out[global_weight_id(GlobalWeight::lm_head)] = &model.lm_head;
    for (uint32_t L = 0; L < n_layers; ++L) {
        const LayerWeights& w = model.layers[L];
        const TensorView* fields[] = {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk,
                                      &w.bv, &w.q_norm, &w.k_norm, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down};
        static_assert(sizeof(fields) / sizeof(fields[0]) == size_t(LayerWeight::count));
        for (uint32_t k = 0; k < uint32_t(LayerWeight::count); ++k) out[layer_weight_id(L, LayerWeight(k))] = fields[k];
    }
    return out;
}

std::vector<WeightFormat> weight_formats(const Model& model) {
    std::vector<WeightFormat> out;
    for (const TensorView* view : weight_views(model)) out.push_back(format_of(*view));
    return out;
}

std::vector<WeightFormat> padded_row_formats(std::vector<WeightFormat> formats, uint32_t align) {
    for (WeightFormat& f : formats)
        if (f.rows > 1) f.row_bytes = (f.row_bytes + align - 1) / align * align;
    return formats;
}

Schedule compile_schedule(const ModelConfig& config, const std::vector<WeightFormat>& weights, const Target& target,
                          Policy policy, uint32_t tp) {
    Graph graph = build_decode_graph(model_dims(config), weights, target, tp);
    Schedule s = build_schedule(graph, assign(graph, target, policy), target);
    s.config_hash = config.hash();
    s.policy = policy_name(policy);
    return s;
}

}  // namespace mk

// compile_schedule: graph -> assignment -> counters.
#include "scheduler/compile.hpp"

#include <algorithm>

#include "models/error.hpp"
#include "models/quant.hpp"
#include "models/synthetic.hpp"
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
// A tensor of `shape` (outermost first, rows along the last dimension) stored in `dtype`: vectors are one row.
WeightFormat format_of(DType dtype, const std::vector<int64_t>& shape) {
    WeightFormat f;
    f.dtype = uint32_t(dtype);
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    f.rows = uint32_t(rows);
    f.cols = uint32_t(shape.back());
    f.row_bytes = row_bytes(dtype, shape.back());
    return f;
}

WeightFormat format_of(const TensorView& t) { return t.data ? format_of(t.dtype, t.shape) : WeightFormat{}; }
}  // namespace

std::vector<const TensorView*> weight_views(const Model& model) {
    const uint32_t n_layers = uint32_t(model.config.n_layers);
    std::vector<const TensorView*> out(n_weight_ids(n_layers), nullptr);
    out[global_weight_id(GlobalWeight::token_embedding)] = &model.token_embedding;
    out[global_weight_id(GlobalWeight::output_norm)] = &model.output_norm;
    out[global_weight_id(GlobalWeight::lm_head)] = &model.lm_head;
    for (uint32_t L = 0; L < n_layers; ++L) {
        for (uint32_t k = 0; k < uint32_t(LayerWeight::count); ++k)
            out[layer_weight_id(L, LayerWeight(k))] = &(model.layers[L].*kLayerWeightFields[k]);
    }
    return out;
}

std::vector<WeightFormat> weight_formats(const Model& model) {
    std::vector<WeightFormat> out;
    for (const TensorView* view : weight_views(model)) out.push_back(format_of(*view));
    return out;
}

std::vector<WeightFormat> synthetic_weight_formats(const SyntheticSpec& spec) {
    const ModelConfig config = synthetic_config(spec);
    std::vector<WeightFormat> out(n_weight_ids(uint32_t(config.n_layers)));
    for (const WeightSpec& w : weight_specs(config)) {
        const WeightFormat f = format_of(synthetic_weight_dtype(w, spec.dtype), w.shape);
        if (w.layer >= 0) {
            out[layer_weight_id(uint32_t(w.layer), LayerWeight(w.layer_weight))] = f;
        } else if (w.model_field == &Model::token_embedding) {
            out[global_weight_id(GlobalWeight::token_embedding)] = f;
            if (config.tied_embeddings) out[global_weight_id(GlobalWeight::lm_head)] = f;  // the same bytes, as loaded
        } else {
            out[global_weight_id(w.model_field == &Model::lm_head ? GlobalWeight::lm_head : GlobalWeight::output_norm)] = f;
        }
    }
    return out;
}

std::vector<WeightFormat> padded_row_formats(std::vector<WeightFormat> formats, uint32_t align) {
    for (WeightFormat& f : formats)
        if (f.rows > 1) f.row_bytes = (f.row_bytes + align - 1) / align * align;
    return formats;
}

Schedule compile_schedule(const ModelConfig& config, const std::vector<WeightFormat>& weights, const Target& target,
                          Policy policy, uint32_t tp, KvType kv_type) {
    ModelDims dims = model_dims(config);
    dims.kv_type = uint32_t(kv_type);
    Graph graph = build_decode_graph(dims, weights, target, tp);
    Schedule s = build_schedule(graph, assign(graph, target, policy), target);
    s.config_hash = config.hash();
    s.policy = policy_name(policy);
    return s;
}

Schedule compile_prefill_schedule(const ModelConfig& config, const std::vector<WeightFormat>& weights,
                                  const Target& target, Policy policy, uint32_t n_tok, bool all_logits,
                                  KvType kv_type, uint32_t tp) {
    ModelDims dims = model_dims(config);
    dims.kv_type = uint32_t(kv_type);
    Graph graph = build_prefill_graph(dims, weights, target, n_tok, all_logits, tp);
    Schedule s = build_schedule(graph, assign(graph, target, policy), target);
    s.config_hash = config.hash();
    s.policy = policy_name(policy);
    return s;
}

}  // namespace mk

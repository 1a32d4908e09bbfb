// Weight slicing for tensor parallelism (see tensor_parallel.hpp).
#include "scheduler/tensor_parallel.hpp"

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

namespace {

constexpr uint32_t kMaxTp = 64;

// Elements per quantization block (1 for plain floats): a column slice must start and end on one.
uint32_t block_elements(uint32_t dtype) { return uint32_t(dtype_traits(DType(dtype)).block_values); }

// How each layer weight splits across ranks (layer_weights.def): rows or columns of the stored weight, or whole.
enum class TpSplit { replicated, rows, cols };
struct LayerWeightInfo {
    const char* name;
    TpSplit split;
};
constexpr LayerWeightInfo kLayerWeights[] = {
#define MK_LAYER_WEIGHT(field, gguf, hf, kind, out, in, rope_rows, split, when) {#field, TpSplit::split},
#include "models/layer_weights.def"
#undef MK_LAYER_WEIGHT
};
static_assert(sizeof(kLayerWeights) / sizeof(kLayerWeights[0]) == size_t(LayerWeight::count));

}  // namespace

void check_tp(const ModelDims& d, const std::vector<WeightFormat>& formats, uint32_t tp) {
    if (tp == 0 || tp > kMaxTp) fail("--tp {}: the tensor-parallel size must be 1..{}", tp, kMaxTp);
    if (tp == 1) return;
    if (d.n_kv_heads % tp != 0)
        fail("--tp {}: the model's {} KV heads do not split {} ways (the TP size must divide the KV heads)", tp,
             d.n_kv_heads, tp);
    if (d.d_ff % tp != 0) fail("--tp {}: the FFN width {} does not split {} ways", tp, d.d_ff, tp);
    if (d.vocab < tp) fail("--tp {}: the vocabulary of {} does not split {} ways", tp, d.vocab, tp);
    if (formats.size() != n_weight_ids(d.n_layers))
        fail("--tp {}: {} weight formats given, the model needs {}", tp, formats.size(), n_weight_ids(d.n_layers));
    // The weights split by columns (the O- and down-projections, the biases): each rank's columns must be whole blocks.
    for (uint32_t L = 0; L < d.n_layers; ++L)
        for (uint32_t w = 0; w < uint32_t(LayerWeight::count); ++w) {
            const WeightFormat& f = formats[layer_weight_id(L, LayerWeight(w))];
            if (kLayerWeights[w].split != TpSplit::cols || !f.present()) continue;
            const uint32_t block = block_elements(f.dtype), per_rank = f.cols / tp;
            if (f.cols % tp != 0 || per_rank % block != 0)
                fail("--tp {}: layer {} {} has {} columns in {}-element {} blocks; {} per rank is not whole blocks", tp,
                     L, kLayerWeights[w].name, f.cols, block, dtype_name(DType(f.dtype)), f.cols / double(tp));
        }
}

ModelDims tp_rank_dims(const ModelDims& model, uint32_t tp) {
    ModelDims d = model;
    d.n_layers = model.n_layers * tp;
    d.n_heads = model.n_heads / tp;
    d.n_kv_heads = model.n_kv_heads / tp;
    d.d_ff = model.d_ff / tp;
    return d;
}

uint32_t tp_vocab_begin(uint32_t vocab, uint32_t tp, uint32_t rank) {
    return uint32_t(uint64_t(vocab) * rank / tp);
}

std::vector<WeightSlice> tp_weight_slices(const ModelDims& d, const std::vector<WeightFormat>& formats, uint32_t tp) {
    check_tp(d, formats, tp);
    const ModelDims r = tp_rank_dims(d, tp);
    std::vector<WeightSlice> out(n_weight_ids(r.n_layers));
    auto whole = [&](uint32_t id) {
        const WeightFormat& f = formats[id];
        return f.present() ? WeightSlice{id, 0, f.rows, 0, f.cols} : WeightSlice{};
    };
    for (uint32_t g = 0; g < uint32_t(GlobalWeight::count); ++g) out[g] = whole(g);  // LM head: rows by instruction
    for (uint32_t k = 0; k < tp; ++k)
        for (uint32_t L = 0; L < d.n_layers; ++L)
            for (uint32_t w = 0; w < uint32_t(LayerWeight::count); ++w) {
                const uint32_t id = layer_weight_id(L, LayerWeight(w));
                WeightSlice s = whole(id);
                // A rank's share of the split dimension (heads, KV heads or FFN columns: check_tp made them divide).
                if (s.source != kNoWeight && kLayerWeights[w].split == TpSplit::rows)
                    s.n_rows /= tp, s.row_begin = k * s.n_rows;
                if (s.source != kNoWeight && kLayerWeights[w].split == TpSplit::cols)
                    s.n_cols /= tp, s.col_begin = k * s.n_cols;
                out[layer_weight_id(k * d.n_layers + L, LayerWeight(w))] = s;
            }
    return out;
}

std::vector<WeightFormat> tp_weight_formats(const std::vector<WeightFormat>& model_formats, const ModelDims& model,
                                            uint32_t tp) {
    if (tp == 1) return model_formats;
    std::vector<WeightFormat> out;
    for (const WeightSlice& s : tp_weight_slices(model, model_formats, tp)) {
        if (s.source == kNoWeight) {
            out.push_back({});
            continue;
        }
        WeightFormat f = model_formats[s.source];
        f.rows = s.n_rows;
        if (f.cols != s.n_cols) {
            f.cols = s.n_cols;
            f.row_bytes = row_bytes(DType(f.dtype), s.n_cols);
        }
        out.push_back(f);
    }
    return out;
}

}  // namespace mk

// A loaded model: config, validated weight views (stored format, mapped in place), tokenizer and chat
// template. Q/K weights always follow mk's adjacent-pair RoPE convention; rotate-half files are permuted at load.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/config.hpp"
#include "models/mapped_file.hpp"
#include "models/tensor.hpp"
#include "models/tokenizer.hpp"

namespace mk {

enum class ModelFormat { gguf, safetensors };
std::string_view format_name(ModelFormat format);  // "gguf", "safetensors"

// One decoder block, a field per line of layer_weights.def (its shape, names and TP split are there).
// Matrices are [out, in] row-major in their stored dtype; norms and biases are float vectors; Q/K rows (and
// their biases, QK-norm weights) are in adjacent-pair RoPE order; absent ones have data == nullptr.
struct LayerWeights {
#define MK_LAYER_WEIGHT(field, ...) TensorView field;
#include "models/layer_weights.def"
#undef MK_LAYER_WEIGHT
};
// The fields in table order: kLayerWeightFields[i] is LayerWeight i (instructions/op_types.hpp).
inline constexpr TensorView LayerWeights::*kLayerWeightFields[] = {
#define MK_LAYER_WEIGHT(field, ...) &LayerWeights::field,
#include "models/layer_weights.def"
#undef MK_LAYER_WEIGHT
};

struct Model {
    explicit Model(Tokenizer tok) : tokenizer(std::move(tok)) {}

    ModelConfig config;
    std::filesystem::path path;  // the .gguf file or the HF directory
    ModelFormat format = ModelFormat::gguf;
    TensorView token_embedding;  // (vocab_size, d_model)
    TensorView output_norm;      // (d_model) float
    TensorView lm_head;          // (vocab_size, d_model); the same bytes as token_embedding when tied
    std::vector<LayerWeights> layers;
    Tokenizer tokenizer;
    std::string chat_template;  // Jinja source, "" when the file has none
    bool qk_rows_permuted = false;    // the file used rotate-half Q/K rows; the loader made them adjacent-pair
    uint64_t total_weight_bytes = 0;  // every distinct weight tensor once
    uint64_t per_token_weight_bytes = 0;  // layer weights + output_norm + lm_head (what one decode step reads)

    // Every distinct weight tensor (the embedding once, even when tied), in load order.
    std::vector<const TensorView*> weights() const;

    // Keep the viewed bytes alive: file mappings and owned (permuted) copies.
    std::vector<std::shared_ptr<const MappedFile>> mappings;
    std::vector<std::vector<uint8_t>> owned;  // each a permuted tensor, same dtype and size as stored
};

// One weight tensor a config implies, with its name in each format and the shape it must have.
enum class WeightKind { embedding, matrix, norm, bias };
struct WeightSpec {
    std::string gguf_name;           // "blk.3.attn_q.weight"
    std::string hf_name;             // "model.layers.3.self_attn.q_proj.weight"
    std::vector<int64_t> shape;      // outermost first: [out, in] for matrices
    WeightKind kind = WeightKind::matrix;
    bool rope_rows = false;          // Q/K rows (or their bias / norm) whose order depends on the RoPE layout
    int layer = -1;                  // -1 for embedding, output_norm, lm_head
    int layer_weight = -1;           // its line of layer_weights.def (a LayerWeight id); -1 for the global ones
    TensorView LayerWeights::*layer_field = nullptr;
    TensorView Model::*model_field = nullptr;
};
// In load order: token embedding, then each layer, then output_norm and (when untied) lm_head.
std::vector<WeightSpec> weight_specs(const ModelConfig& config);

// A .gguf file, or a directory with config.json, model.safetensors (or an index and shards) and tokenizer.json.
// Every tensor is checked for presence, dtype and shape: "model.gguf: tensor blk.3.ffn_up.weight: expected
// shape [1536, 576], got [576, 576]".
Model load_model(const std::filesystem::path& path);

// Permutes the rows of a Q/K weight (n_rows = n_heads · head_dim, row_bytes each) between the two RoPE
// layouts, head by head. to_adjacent: new row 2i+j = old row j·half + i (rotate-half -> adjacent-pair);
// otherwise the inverse. For a vector (bias, q_norm) pass row_bytes = element size.
void permute_rope_rows(const uint8_t* src, uint8_t* dst, int64_t n_rows, size_t row_bytes, int64_t head_dim,
                       bool to_adjacent);

}  // namespace mk

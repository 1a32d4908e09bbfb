// Synthetic models: named real shapes (smollm2-135m, llama-3.2-1b, llama-3.1-8b, llama-3.1-70b, qwen2-0.5b,
// qwen3-0.6b) and tiny test shapes, with seeded random weights, written as a real GGUF file or HF safetensors
// directory that load_model reads back. A schedule needs only the config and the weights' dtypes (no file).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/config.hpp"
#include "models/model.hpp"
#include "models/tensor.hpp"
#include "models/tokenizer.hpp"

namespace mk {

struct SyntheticSpec {
    std::string shape = "tiny-llama";
    DType dtype = DType::F32;  // matrices and embedding; norms, biases and rope_freqs are F32
    ModelFormat format = ModelFormat::gguf;
    uint64_t seed = 0;
    // Overrides of the shape's own sizes (spec keys: layers, vocab, d_model, heads, kv_heads, head_dim, ff, context).
    std::optional<int64_t> n_layers, vocab_size, d_model, n_heads, n_kv_heads, head_dim, d_ff, context_length;
};

// "synthetic:SHAPE:DTYPE[:layers=N][:vocab=N][:seed=N][:format=gguf|safetensors][:d_model=N][:heads=N]
//  [:kv_heads=N][:head_dim=N][:ff=N][:context=N]", DTYPE one of f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q6_k.
// Throws naming the bad part; safetensors with a block dtype is refused.
SyntheticSpec parse_synthetic_spec(std::string_view spec);
bool is_synthetic_spec(std::string_view text);  // starts with "synthetic:"
std::string to_string(const SyntheticSpec& spec);  // the canonical spec string, which parses back to `spec`

std::vector<std::string> synthetic_shapes();
ModelConfig synthetic_config(std::string_view shape);  // throws for an unknown shape, listing the known ones
ModelConfig synthetic_config(const SyntheticSpec& spec);  // the shape with the overrides applied; validated

// The stored dtype of a matrix whose rows have `row_length` values: `wanted` when its block fits, else the
// nearest format that does (Q4_K -> Q4_1, Q6_K -> Q8_0, then F16), as llama.cpp's quantizer falls back.
DType synthetic_storage_dtype(DType wanted, int64_t row_length);

// The dtype write_synthetic_model stores weight `w` in when `wanted` is asked for: F32 for norms and biases,
// synthetic_storage_dtype for matrices and the embedding.
DType synthetic_weight_dtype(const WeightSpec& w, DType wanted);

// A byte-level BPE vocabulary of exactly vocab_size tokens (>= 259): <|endoftext|>, <|im_start|>, <|im_end|>,
// the 256 bytes, then deterministic merges (learned from a small built-in text, then systematic).
TokenizerData synthetic_tokenizer(int64_t vocab_size);
// The ChatML Jinja template the synthetic models carry.
std::string_view synthetic_chat_template();

// Writes a .gguf file (format gguf) or a directory with config.json, model.safetensors, tokenizer.json and
// tokenizer_config.json (format safetensors). Q/K rows use each real format's layout (GGUF llama:
// adjacent-pair; HF and GGUF qwen2/qwen3: rotate-half), so every format loads to the same weights.
void write_synthetic_model(const SyntheticSpec& spec, const std::filesystem::path& out);

// The canonical (adjacent-pair layout) fp32 values of one weight, as write_synthetic_model draws them:
// uniform in (−1, 1) scaled by 1/sqrt(fan_in) for matrices, ±1 for the embedding, 1 ± 0.2 for norms,
// ±0.1 for biases, never exactly zero, seeded by (seed, weight.gguf_name). (n_elements) f32, rows contiguous.
std::vector<float> synthetic_weight_values(const WeightSpec& weight, uint64_t seed);

}  // namespace mk

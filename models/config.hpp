// ModelConfig: the shape of a decoder-only transformer (Llama, Qwen2, Qwen3), read from GGUF metadata
// or an HF config.json and validated; every error names the file and the key. Nothing is hard-coded.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mk {

class GgufFile;

enum class Arch { llama, qwen2, qwen3 };

std::string_view arch_name(Arch arch);  // "llama", "qwen2", "qwen3" (GGUF's general.architecture)
Arch parse_arch(std::string_view name);  // throws mk::Error for anything else

struct ModelConfig {
    Arch arch = Arch::llama;
    std::string name;             // general.name, or the directory / file stem
    int64_t n_layers = 0;
    int64_t d_model = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;         // Qwen3 has n_heads * head_dim != d_model
    int64_t d_ff = 0;
    int64_t vocab_size = 0;
    int64_t context_length = 0;
    float rope_base = 10000.0f;
    // Per rotary pair i in [0, head_dim/2): θ_i = pos · rope_base^(−2i/head_dim) / rope_freq_factors[i].
    // Empty means no scaling. From GGUF's rope_freqs.weight or computed from HF rope_scaling.
    std::vector<float> rope_freq_factors;
    std::string rope_scaling = "none";  // human-readable description, for `mk info`
    float norm_eps = 1e-5f;
    bool tied_embeddings = false;  // the LM head is the token embedding
    bool qkv_bias = false;         // Qwen2: biases on Q, K, V
    bool qk_norm = false;          // Qwen3: per-head RMSNorm on Q and K before RoPE

    int64_t q_dim() const { return n_heads * head_dim; }
    int64_t kv_dim() const { return n_kv_heads * head_dim; }
    // Stable FNV-1a over every field that changes the computation (all but `name` and the
    // `rope_scaling` text, whose effect is the hashed rope_freq_factors). Schedules record it.
    uint64_t hash() const;
};

// Key names used in validation errors; the defaults are the field names.
struct ConfigKeys {
    std::string n_layers = "n_layers", d_model = "d_model", n_heads = "n_heads", n_kv_heads = "n_kv_heads";
    std::string head_dim = "head_dim", d_ff = "d_ff", vocab_size = "vocab_size";
    std::string context_length = "context_length", rope_base = "rope_base", norm_eps = "norm_eps";
    std::string rope_freq_factors = "rope_freq_factors";
};
ConfigKeys gguf_config_keys(std::string_view arch);  // "llama.block_count", ...
ConfigKeys hf_config_keys();                         // "num_hidden_layers", ...

// Throws "{source}: {key}: ..." when a size is non-positive or absurd, heads do not divide,
// head_dim is odd, or rope_freq_factors has the wrong length or a non-positive entry.
void validate_config(const ModelConfig& config, const std::string& source, const ConfigKeys& keys = {});

// HF's "llama3" rope scaling as per-pair divisors of the base frequencies (length head_dim/2).
std::vector<float> llama3_rope_freq_factors(float rope_base, int64_t head_dim, float factor, float low_freq_factor,
                                            float high_freq_factor, int64_t original_context);

// From a parsed GGUF (metadata plus the optional rope_freqs.weight tensor); validated.
ModelConfig config_from_gguf(const GgufFile& file);
// From HF config.json text; `source` names it in errors. Validated.
ModelConfig config_from_hf_json(std::string_view json_text, const std::string& source);
ModelConfig config_from_hf_json_file(const std::filesystem::path& config_json);

// One line per field, for `mk info` and test failure messages.
std::string describe(const ModelConfig& config);

}  // namespace mk

// ModelConfig from GGUF metadata ({arch}.block_count, ...) and the optional rope_freqs.weight tensor.
// Errors name the file and the key.
#include <cmath>
#include <cstring>

#include "models/config.hpp"
#include "models/error.hpp"
#include "models/gguf.hpp"

namespace mk {

namespace {

// A size from metadata; rejects values that do not fit comfortably in int64 before validation sees them.
int64_t get_size(const GgufFile& file, const std::string& key, std::optional<uint64_t> fallback = std::nullopt) {
    uint64_t v = file.get_u64(key, fallback);
    if (v > (uint64_t(1) << 40)) fail("{}: {}: {} is absurd", file.name(), key, v);
    return int64_t(v);
}

std::vector<float> read_rope_freqs(const GgufFile& file) {
    const GgufTensorInfo* info = file.find_tensor("rope_freqs.weight");
    if (!info) return {};
    TensorView t = file.tensor("rope_freqs.weight");
    if (t.dtype != DType::F32 || t.shape.size() != 1)
        fail("{}: tensor rope_freqs.weight: expected a 1-D F32 vector", file.name());
    std::vector<float> factors(size_t(t.shape[0]));  // (head_dim/2) f32
    if (t.n_bytes != factors.size() * sizeof(float)) fail("{}: tensor rope_freqs.weight: size mismatch", file.name());
    std::memcpy(factors.data(), t.data, t.n_bytes);
    return factors;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& file) {
    const std::string& source = file.name();
    std::string arch_key = file.get_string("general.architecture");
    ModelConfig c;
    c.arch = with_context(source + ": general.architecture", [&] { return parse_arch(arch_key); });
    const std::string a(arch_name(c.arch));
    const ConfigKeys keys = gguf_config_keys(a);

    std::string stem = std::filesystem::path(source).stem().string();
    c.name = file.get_string("general.name", stem);
    c.n_layers = get_size(file, keys.n_layers);
    c.d_model = get_size(file, keys.d_model);
    c.d_ff = get_size(file, keys.d_ff);
    c.n_heads = get_size(file, keys.n_heads);
    c.n_kv_heads = get_size(file, keys.n_kv_heads, uint64_t(c.n_heads));
    if (c.n_heads <= 0) fail("{}: {}: must be positive", source, keys.n_heads);
    if (!file.find(keys.head_dim) && c.d_model % c.n_heads != 0)
        fail("{}: {}: absent, and {} heads do not divide d_model {}", source, keys.head_dim, c.n_heads, c.d_model);
    c.head_dim = get_size(file, keys.head_dim, uint64_t(c.d_model / c.n_heads));
    if (const GgufValue* v = file.find(a + ".attention.value_length"); v && int64_t(v->as_u64()) != c.head_dim)
        fail("{}: {}.attention.value_length: {} differs from key_length {} (unsupported)", source, a, v->as_u64(),
             c.head_dim);
    if (const GgufValue* v = file.find(a + ".rope.dimension_count"); v && int64_t(v->as_u64()) != c.head_dim)
        fail("{}: {}.rope.dimension_count: partial rotary ({} of {} dims) is unsupported", source, a, v->as_u64(),
             c.head_dim);
    c.context_length = get_size(file, keys.context_length);
    c.rope_base = float(file.get_f64(keys.rope_base, 10000.0));
    c.norm_eps = float(file.get_f64(keys.norm_eps));

    if (file.find(keys.vocab_size)) {
        c.vocab_size = get_size(file, keys.vocab_size);
    } else if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
        c.vocab_size = int64_t(tokens->as_array().values.size());
    } else {
        fail("{}: neither {} nor tokenizer.ggml.tokens is present", source, keys.vocab_size);
    }

    c.rope_freq_factors = read_rope_freqs(file);
    std::string scaling = file.get_string(a + ".rope.scaling.type", "none");
    if (!c.rope_freq_factors.empty()) {
        c.rope_scaling = "rope_freqs.weight";
    } else if (scaling == "linear") {
        float factor = float(file.get_f64(a + ".rope.scaling.factor"));
        if (!(factor > 0)) fail("{}: {}.rope.scaling.factor: {} must be positive", source, a, factor);
        c.rope_freq_factors.assign(size_t(c.head_dim / 2), factor);
        c.rope_scaling = "linear (factor " + std::to_string(factor) + ")";
    } else if (scaling != "none") {
        fail("{}: {}.rope.scaling.type: '{}' is unsupported", source, a, scaling);
    }

    c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
    c.qkv_bias = c.arch == Arch::qwen2 || file.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = c.arch == Arch::qwen3 || file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    validate_config(c, source, keys);
    return c;
}

}  // namespace mk

// ModelConfig basics shared by the GGUF and HF readers: arch names, the stable hash, validation,
// llama3 rope factors and a printable description.
#include "models/config.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <numbers>

#include "models/error.hpp"

namespace mk {

std::string_view arch_name(Arch arch) {
    switch (arch) {
        case Arch::llama: return "llama";
        case Arch::qwen2: return "qwen2";
        case Arch::qwen3: return "qwen3";
    }
    return "?";
}

Arch parse_arch(std::string_view name) {
    if (name == "llama") return Arch::llama;
    if (name == "qwen2") return Arch::qwen2;
    if (name == "qwen3") return Arch::qwen3;
    fail("unsupported architecture '{}' (mk supports llama, qwen2, qwen3)", name);
}

namespace {

// FNV-1a, 64-bit, over little-endian encodings so the hash is the same on every host.
struct Fnv1a {
    uint64_t h = 0xcbf29ce484222325ull;
    void byte(uint8_t b) {
        h ^= b;
        h *= 0x100000001b3ull;
    }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) byte(uint8_t(v >> (8 * i)));
    }
    void f32(float v) { u64(std::bit_cast<uint32_t>(v)); }
};

}  // namespace

uint64_t ModelConfig::hash() const {
    Fnv1a f;
    f.u64(uint64_t(arch));
    for (int64_t v : {n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size, context_length}) f.u64(uint64_t(v));
    f.f32(rope_base);
    f.u64(rope_freq_factors.size());
    for (float v : rope_freq_factors) f.f32(v);
    f.f32(norm_eps);
    f.byte(tied_embeddings);
    f.byte(qkv_bias);
    f.byte(qk_norm);
    return f.h;
}

ConfigKeys gguf_config_keys(std::string_view arch) {
    std::string a(arch);
    ConfigKeys k;
    k.n_layers = a + ".block_count";
    k.d_model = a + ".embedding_length";
    k.n_heads = a + ".attention.head_count";
    k.n_kv_heads = a + ".attention.head_count_kv";
    k.head_dim = a + ".attention.key_length";
    k.d_ff = a + ".feed_forward_length";
    k.vocab_size = a + ".vocab_size";
    k.context_length = a + ".context_length";
    k.rope_base = a + ".rope.freq_base";
    k.norm_eps = a + ".attention.layer_norm_rms_epsilon";
    k.rope_freq_factors = "rope_freqs.weight";
    return k;
}

ConfigKeys hf_config_keys() {
    ConfigKeys k;
    k.n_layers = "num_hidden_layers";
    k.d_model = "hidden_size";
    k.n_heads = "num_attention_heads";
    k.n_kv_heads = "num_key_value_heads";
    k.head_dim = "head_dim";
    k.d_ff = "intermediate_size";
    k.vocab_size = "vocab_size";
    k.context_length = "max_position_embeddings";
    k.rope_base = "rope_theta";
    k.norm_eps = "rms_norm_eps";
    k.rope_freq_factors = "rope_scaling";
    return k;
}

void validate_config(const ModelConfig& c, const std::string& source, const ConfigKeys& keys) {
    // Bounds far above any real model, low enough that products of sizes cannot overflow.
    auto check = [&](int64_t v, const std::string& key, int64_t max) {
        if (v <= 0 || v > max) fail("{}: {}: {} is out of range [1, {}]", source, key, v, max);
    };
    check(c.n_layers, keys.n_layers, 4096);
    check(c.d_model, keys.d_model, 1 << 17);
    check(c.n_heads, keys.n_heads, 1 << 12);
    check(c.n_kv_heads, keys.n_kv_heads, 1 << 12);
    check(c.head_dim, keys.head_dim, 1 << 12);
    check(c.d_ff, keys.d_ff, 1 << 20);
    check(c.vocab_size, keys.vocab_size, 1 << 24);
    check(c.context_length, keys.context_length, int64_t(1) << 24);
    if (c.n_heads % c.n_kv_heads != 0)
        fail("{}: {}: {} KV heads do not divide {} heads", source, keys.n_kv_heads, c.n_kv_heads, c.n_heads);
    if (c.head_dim % 2 != 0) fail("{}: {}: head_dim {} is odd (RoPE rotates pairs)", source, keys.head_dim, c.head_dim);
    if (c.q_dim() > (int64_t(1) << 20))
        fail("{}: {}: {} heads × head_dim {} is absurd", source, keys.n_heads, c.n_heads, c.head_dim);
    if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0f)
        fail("{}: {}: {} is not a valid RoPE base", source, keys.rope_base, c.rope_base);
    if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0.0f || c.norm_eps >= 1.0f)
        fail("{}: {}: {} is not a valid RMSNorm epsilon", source, keys.norm_eps, c.norm_eps);
    if (!c.rope_freq_factors.empty()) {
        if (int64_t(c.rope_freq_factors.size()) != c.head_dim / 2)
            fail("{}: {}: {} factors, expected head_dim/2 = {}", source, keys.rope_freq_factors,
                 c.rope_freq_factors.size(), c.head_dim / 2);
        for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
            float f = c.rope_freq_factors[i];
            if (!std::isfinite(f) || f <= 0.0f) fail("{}: {}: factor {} is {}", source, keys.rope_freq_factors, i, f);
        }
    }
}

std::vector<float> llama3_rope_freq_factors(float rope_base, int64_t head_dim, float factor, float low_freq_factor,
                                            float high_freq_factor, int64_t original_context) {
    if (!(factor > 0) || !(low_freq_factor > 0) || !(high_freq_factor > low_freq_factor) || original_context <= 0)
        fail("llama3 rope scaling: invalid parameters (factor {}, low_freq_factor {}, high_freq_factor {}, "
             "original_max_position_embeddings {})",
             factor, low_freq_factor, high_freq_factor, original_context);
    const double low_freq_wavelen = double(original_context) / low_freq_factor;
    const double high_freq_wavelen = double(original_context) / high_freq_factor;
    std::vector<float> factors(size_t(head_dim / 2));  // (head_dim/2) f32, one divisor per rotary pair
    for (size_t i = 0; i < factors.size(); ++i) {
        double freq = std::pow(double(rope_base), -2.0 * double(i) / double(head_dim));
        double wavelen = 2.0 * std::numbers::pi / freq;
        if (wavelen < high_freq_wavelen) {
            factors[i] = 1.0f;
        } else if (wavelen > low_freq_wavelen) {
            factors[i] = factor;
        } else {
            double s = (double(original_context) / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            factors[i] = float(1.0 / ((1.0 - s) / factor + s));
        }
    }
    return factors;
}

std::string describe(const ModelConfig& c) {
    return fmt::format(
        "arch {}\nname {}\nn_layers {}\nd_model {}\nn_heads {}\nn_kv_heads {}\nhead_dim {}\nd_ff {}\nvocab_size {}\n"
        "context_length {}\nrope_base {}\nrope_scaling {}\nnorm_eps {}\ntied_embeddings {}\nqkv_bias {}\nqk_norm {}\n"
        "hash {:016x}\n",
        arch_name(c.arch), c.name, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff, c.vocab_size,
        c.context_length, c.rope_base, c.rope_scaling, c.norm_eps, c.tied_embeddings, c.qkv_bias, c.qk_norm, c.hash());
}

}  // namespace mk

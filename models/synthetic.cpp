// Synthetic models: the shape table, seeded weight values, and the GGUF / HF safetensors writers.
// Weights are drawn in mk's adjacent-pair Q/K layout and permuted to each real format's layout on write.
#include "models/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "models/error.hpp"
#include "models/gguf_writer.hpp"
#include "models/quant.hpp"
#include "models/safetensors.hpp"

namespace mk {

namespace {

struct ShapeDef {
    const char* name;
    Arch arch;
    int64_t n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size, context_length;
    float rope_base, norm_eps;
    bool tied;
    float llama3_factor, llama3_low, llama3_high;  // llama3 rope scaling; factor 0 = none
    int64_t llama3_original_context;
    const char* pre;  // tokenizer.ggml.pre
};

// Real shapes (from the models' own config.json) and tiny ones for tests. tiny-* use d_ff 256 so that
// ffn_down rows fit a K-quant super-block; tiny-qwen3 has n_heads · head_dim != d_model as Qwen3 does.
constexpr ShapeDef kShapes[] = {
    {"smollm2-135m", Arch::llama, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, 1e-5f, true, 0, 0, 0, 0, "smollm"},
    {"llama-3.2-1b", Arch::llama, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, 32, 1, 4, 8192,
     "llama-bpe"},
    {"llama-3.1-8b", Arch::llama, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 1e-5f, false, 8, 1, 4, 8192,
     "llama-bpe"},
    {"llama-3.1-70b", Arch::llama, 80, 8192, 64, 8, 128, 28672, 128256, 131072, 500000.0f, 1e-5f, false, 8, 1, 4, 8192,
     "llama-bpe"},
    {"qwen2-0.5b", Arch::qwen2, 24, 896, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, 0, 0, 0, 0, "qwen2"},
    {"qwen3-0.6b", Arch::qwen3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, 0, 0, 0, 0, "qwen2"},
    {"tiny-llama", Arch::llama, 2, 64, 4, 2, 16, 256, 512, 512, 10000.0f, 1e-5f, false, 0, 0, 0, 0, "gpt-2"},
    {"tiny-llama3", Arch::llama, 2, 64, 4, 2, 16, 256, 512, 512, 10000.0f, 1e-5f, true, 8, 1, 4, 256, "llama-bpe"},
    {"tiny-qwen2", Arch::qwen2, 2, 64, 4, 2, 16, 256, 512, 512, 1000000.0f, 1e-6f, true, 0, 0, 0, 0, "qwen2"},
    {"tiny-qwen3", Arch::qwen3, 2, 64, 4, 2, 32, 256, 512, 512, 1000000.0f, 1e-6f, true, 0, 0, 0, 0, "qwen2"},
};

const ShapeDef& find_shape(std::string_view name) {
    for (const ShapeDef& s : kShapes)
        if (name == s.name) return s;
    fail("unknown synthetic shape '{}' (known: {})", name, fmt::join(synthetic_shapes(), ", "));
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Value k of a weight is a pure function of (seed, name, k) (splitmix64 at counter k), so rows can be
// drawn in any order and on any thread with the same result.
struct Draw {
    uint64_t state;
    float scale, offset;

    Draw(const WeightSpec& w, uint64_t seed) : scale(1.0f), offset(0.0f) {
        uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
        for (unsigned char c : w.gguf_name) h = (h ^ c) * 0x100000001b3ull;
        state = mix64((seed ^ h) + kGolden);
        switch (w.kind) {
            case WeightKind::embedding: break;
            case WeightKind::matrix: scale = 1.0f / std::sqrt(float(w.shape.back())); break;
            case WeightKind::norm: scale = 0.2f, offset = 1.0f; break;
            case WeightKind::bias: scale = 0.1f; break;
        }
    }
    // (2k+1)/2^23 − 1 for a 23-bit k: uniform in (−1, 1), exact in f32, never 0.
    float operator()(uint64_t k) const {
        return offset + scale * (float(2 * (mix64(state + (k + 1) * kGolden) >> 41) + 1) * 0x1p-23f - 1.0f);
    }
};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Runs body(r0, r1) over [0, n_rows) split across the cores; the first exception is rethrown.
void parallel_rows(int64_t n_rows, const std::function<void(int64_t, int64_t)>& body) {
    const int64_t n_threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, n_rows / 64));
    if (n_threads == 1) return body(0, n_rows);
    const int64_t chunk = (n_rows + n_threads - 1) / n_threads;
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n_threads));
    for (int64_t t = 0; t < n_threads; ++t)
        threads.emplace_back([&, t] {
            try {
                body(t * chunk, std::min(n_rows, (t + 1) * chunk));
            } catch (...) {
                errors[size_t(t)] = std::current_exception();
            }
        });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

// The bytes a file stores for one weight in `dtype`: Q/K rows rotate-half unless `adjacent_layout`.
void stored_bytes(const WeightSpec& w, const ModelConfig& c, uint64_t seed, bool adjacent_layout, DType dtype,
                  std::span<uint8_t> dst) {
    const bool rotate_half = w.rope_rows && !adjacent_layout;
    if (w.shape.size() == 1) {  // norms and biases: one small row, permuted element by element
        std::vector<float> v = synthetic_weight_values(w, seed);  // (n) f32, adjacent-pair layout
        std::vector<float> out(v.size());                         // (n) f32, stored layout
        if (rotate_half)
            permute_rope_rows(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(out.data()),
                              w.shape[0], sizeof(float), c.head_dim, false);
        quantize_row(dtype, rotate_half ? out.data() : v.data(), dst.data(), w.shape[0]);
        return;
    }
    const int64_t row_length = w.shape.back(), n_rows = int64_t(dst.size() / row_bytes(dtype, row_length));
    const size_t stride = row_bytes(dtype, row_length);
    const Draw draw(w, seed);
    const int64_t head_dim = c.head_dim, half = head_dim / 2;
    parallel_rows(n_rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(row_length));  // (row_length) f32, one stored row
        for (int64_t r = r0; r < r1; ++r) {
            // Stored rotate-half row j·half + i of a head holds canonical (adjacent-pair) row 2i + j.
            int64_t within = r % head_dim;
            int64_t src = rotate_half ? r - within + 2 * (within % half) + within / half : r;
            for (int64_t k = 0; k < row_length; ++k) row[size_t(k)] = draw(uint64_t(src * row_length + k));
            quantize_row(dtype, row.data(), dst.data() + size_t(r) * stride, row_length);
        }
    });
}

void write_gguf(const SyntheticSpec& spec, const ShapeDef& shape, const ModelConfig& c, const std::filesystem::path& out) {
    const std::string a(arch_name(c.arch));
    GgufWriter w;
    w.add_string("general.architecture", a);
    w.add_string("general.name", c.name);
    w.add_u32(a + ".block_count", uint32_t(c.n_layers));
    w.add_u32(a + ".context_length", uint32_t(c.context_length));
    w.add_u32(a + ".embedding_length", uint32_t(c.d_model));
    w.add_u32(a + ".feed_forward_length", uint32_t(c.d_ff));
    w.add_u32(a + ".attention.head_count", uint32_t(c.n_heads));
    w.add_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
    w.add_u32(a + ".attention.key_length", uint32_t(c.head_dim));
    w.add_u32(a + ".attention.value_length", uint32_t(c.head_dim));
    w.add_u32(a + ".rope.dimension_count", uint32_t(c.head_dim));
    w.add_f32(a + ".rope.freq_base", c.rope_base);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
    w.add_u32(a + ".vocab_size", uint32_t(c.vocab_size));

    TokenizerData tok = synthetic_tokenizer(c.vocab_size);
    tok.pre = shape.pre;
    std::vector<int32_t> types;  // (vocab_size) i32 GGUF token types
    for (TokenType t : tok.types) types.push_back(int32_t(t));
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", tok.pre);
    w.add_strings("tokenizer.ggml.tokens", tok.tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
    w.add_strings("tokenizer.ggml.merges", tok.merges);
    w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(tok.bos_id));
    w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(tok.eos_id));
    w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(tok.pad_id));
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    w.add_string("tokenizer.chat_template", std::string(synthetic_chat_template()));

    if (!c.rope_freq_factors.empty())
        w.add_tensor_f32("rope_freqs.weight", DType::F32, {int64_t(c.rope_freq_factors.size())}, c.rope_freq_factors);
    // GGUF llama files carry adjacent-pair Q/K rows (the converter permutes them); qwen2/qwen3 keep rotate-half.
    const bool adjacent = c.arch == Arch::llama;
    for (const WeightSpec& ws : weight_specs(c)) {
        DType dtype = synthetic_weight_dtype(ws, spec.dtype);
        int64_t n_rows = ws.shape.size() == 1 ? 1 : ws.shape[0];
        std::vector<uint8_t> bytes(size_t(n_rows) * row_bytes(dtype, ws.shape.back()));  // (rows) in dtype's format
        stored_bytes(ws, c, spec.seed, adjacent, dtype, bytes);
        w.add_tensor(ws.gguf_name, dtype, ws.shape, std::move(bytes));
    }
    w.write(out);
}

std::string torch_dtype(DType t) {
    switch (t) {
        case DType::F32: return "float32";
        case DType::F16: return "float16";
        default: return "bfloat16";
    }
}

void write_json(const nlohmann::json& j, const std::filesystem::path& path) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) fail("{}: write failed", path.string());
}

void write_safetensors(const SyntheticSpec& spec, const ShapeDef& shape, const ModelConfig& c,
                       const std::filesystem::path& dir) {
    if (!is_float(spec.dtype))
        fail("synthetic model: safetensors stores F32, F16 or BF16, not {}", dtype_name(spec.dtype));
    std::filesystem::create_directories(dir);
    static const char* kHfArch[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    TokenizerData tok = synthetic_tokenizer(c.vocab_size);
    tok.pre = shape.pre;
    nlohmann::json config = {
        {"architectures", {kHfArch[int(c.arch)]}},
        {"model_type", std::string(arch_name(c.arch))},
        {"_name_or_path", c.name},
        {"num_hidden_layers", c.n_layers},
        {"hidden_size", c.d_model},
        {"intermediate_size", c.d_ff},
        {"num_attention_heads", c.n_heads},
        {"num_key_value_heads", c.n_kv_heads},
        {"head_dim", c.head_dim},
        {"vocab_size", c.vocab_size},
        {"max_position_embeddings", c.context_length},
        {"rope_theta", c.rope_base},
        {"rms_norm_eps", c.norm_eps},
        {"tie_word_embeddings", c.tied_embeddings},
        {"hidden_act", "silu"},
        {"attention_bias", c.qkv_bias},
        {"torch_dtype", torch_dtype(spec.dtype)},
        {"bos_token_id", tok.bos_id},
        {"eos_token_id", tok.eos_id},
        {"rope_scaling", nullptr},
    };
    if (shape.llama3_factor > 0)
        config["rope_scaling"] = {{"rope_type", "llama3"},
                                  {"factor", shape.llama3_factor},
                                  {"low_freq_factor", shape.llama3_low},
                                  {"high_freq_factor", shape.llama3_high},
                                  {"original_max_position_embeddings", shape.llama3_original_context}};
    write_json(config, dir / "config.json");
    write_json({{"chat_template", synthetic_chat_template()}}, dir / "tokenizer_config.json");
    write_hf_tokenizer_json(tok, dir / "tokenizer.json");  // adds the special tokens to tokenizer_config.json

    const std::vector<WeightSpec> specs = weight_specs(c);
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const WeightSpec& ws : specs) w.add(ws.hf_name, synthetic_weight_dtype(ws, spec.dtype), ws.shape);
    w.write(dir / "model.safetensors", [&](size_t i, std::span<uint8_t> dst) {
        stored_bytes(specs[i], c, spec.seed, false, synthetic_weight_dtype(specs[i], spec.dtype), dst);
    });
}

}  // namespace

std::vector<std::string> synthetic_shapes() {
    std::vector<std::string> names;
    for (const ShapeDef& s : kShapes) names.emplace_back(s.name);
    return names;
}

ModelConfig synthetic_config(std::string_view shape) {
    SyntheticSpec spec;
    spec.shape = std::string(shape);
    return synthetic_config(spec);
}

ModelConfig synthetic_config(const SyntheticSpec& spec) {
    const ShapeDef& s = find_shape(spec.shape);
    ModelConfig c;
    c.arch = s.arch;
    c.name = "synthetic-" + spec.shape;
    c.n_layers = spec.n_layers.value_or(s.n_layers);
    c.d_model = spec.d_model.value_or(s.d_model);
    c.n_heads = spec.n_heads.value_or(s.n_heads);
    c.n_kv_heads = spec.n_kv_heads.value_or(s.n_kv_heads);
    c.head_dim = spec.head_dim.value_or(s.head_dim);
    c.d_ff = spec.d_ff.value_or(s.d_ff);
    c.vocab_size = spec.vocab_size.value_or(s.vocab_size);
    c.context_length = spec.context_length.value_or(s.context_length);
    c.rope_base = s.rope_base;
    c.norm_eps = s.norm_eps;
    c.tied_embeddings = s.tied;
    c.qkv_bias = s.arch == Arch::qwen2;
    c.qk_norm = s.arch == Arch::qwen3;
    const std::string source = "synthetic:" + spec.shape;
    validate_config(c, source);
    if (c.vocab_size < 259) fail("{}: vocab {} is below the 259 tokens of the byte-level vocabulary", source, c.vocab_size);
    if (s.llama3_factor > 0) {
        c.rope_freq_factors = llama3_rope_freq_factors(c.rope_base, c.head_dim, s.llama3_factor, s.llama3_low,
                                                       s.llama3_high, s.llama3_original_context);
        c.rope_scaling = fmt::format(
            "llama3 (factor {}, low_freq_factor {}, high_freq_factor {}, original_max_position_embeddings {})",
            s.llama3_factor, s.llama3_low, s.llama3_high, s.llama3_original_context);
    }
    return c;
}

DType synthetic_storage_dtype(DType wanted, int64_t row_length) {
    if (row_length % dtype_traits(wanted).block_values == 0) return wanted;
    if (wanted == DType::Q4_K && row_length % 32 == 0) return DType::Q4_1;
    if (wanted == DType::Q6_K && row_length % 32 == 0) return DType::Q8_0;
    return DType::F16;
}

DType synthetic_weight_dtype(const WeightSpec& w, DType wanted) {
    if (w.kind == WeightKind::norm || w.kind == WeightKind::bias) return DType::F32;
    return synthetic_storage_dtype(wanted, w.shape.back());
}

std::vector<float> synthetic_weight_values(const WeightSpec& w, uint64_t seed) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    const Draw draw(w, seed);
    std::vector<float> v(static_cast<size_t>(n));  // (n) f32
    for (size_t k = 0; k < v.size(); ++k) v[k] = draw(k);
    return v;
}

void write_synthetic_model(const SyntheticSpec& spec, const std::filesystem::path& out) {
    const ShapeDef& shape = find_shape(spec.shape);
    ModelConfig c = synthetic_config(spec);
    with_context(out.string(), [&] {
        if (spec.format == ModelFormat::gguf)
            write_gguf(spec, shape, c, out);
        else
            write_safetensors(spec, shape, c, out);
    });
}

}  // namespace mk

// ModelConfig from a Hugging Face config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM),
// including llama3 / linear rope_scaling. Errors name the file and the key.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/config.hpp"
#include "models/error.hpp"

namespace mk {

namespace {

using nlohmann::json;

struct HfReader {
    const json& j;
    const std::string& source;

    const json* find(const json& obj, const std::string& key) const {
        auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }
    int64_t get_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt, const json* obj = nullptr,
                    const std::string& prefix = "") const {
        const json* v = find(obj ? *obj : j, key);
        if (!v) {
            if (fallback) return *fallback;
            fail("{}: missing key {}{}", source, prefix, key);
        }
        if (!v->is_number_integer()) fail("{}: {}{}: expected an integer, got {}", source, prefix, key, v->dump());
        if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t(1) << 40))
            fail("{}: {}{}: {} is absurd", source, prefix, key, v->dump());
        return v->get<int64_t>();
    }
    double get_float(const std::string& key, std::optional<double> fallback = std::nullopt, const json* obj = nullptr,
                     const std::string& prefix = "") const {
        const json* v = find(obj ? *obj : j, key);
        if (!v) {
            if (fallback) return *fallback;
            fail("{}: missing key {}{}", source, prefix, key);
        }
        if (!v->is_number()) fail("{}: {}{}: expected a number, got {}", source, prefix, key, v->dump());
        return v->get<double>();
    }
    bool get_bool(const std::string& key, bool fallback) const {
        const json* v = find(j, key);
        if (!v) return fallback;
        if (!v->is_boolean()) fail("{}: {}: expected true or false, got {}", source, key, v->dump());
        return v->get<bool>();
    }
};

Arch arch_from_hf(const HfReader& r) {
    if (const json* archs = r.find(r.j, "architectures")) {
        if (!archs->is_array()) fail("{}: architectures: expected an array", r.source);
        for (const json& a : *archs) {
            if (a == "LlamaForCausalLM") return Arch::llama;
            if (a == "Qwen2ForCausalLM") return Arch::qwen2;
            if (a == "Qwen3ForCausalLM") return Arch::qwen3;
        }
        fail("{}: architectures: {} is unsupported (mk supports LlamaForCausalLM, Qwen2ForCausalLM, "
             "Qwen3ForCausalLM)",
             r.source, archs->dump());
    }
    const json* type = r.find(r.j, "model_type");
    if (!type || !type->is_string()) fail("{}: missing key architectures", r.source);
    return with_context(r.source + ": model_type", [&] { return parse_arch(type->get<std::string>()); });
}

// rope_theta and rope_scaling; transformers 5 nests both in "rope_parameters".
void read_rope(const HfReader& r, ModelConfig& c) {
    const json* params = r.find(r.j, "rope_parameters");
    const json* scaling = params ? params : r.find(r.j, "rope_scaling");
    const std::string prefix = params ? "rope_parameters." : "rope_scaling.";
    c.rope_base = float(params ? r.get_float("rope_theta", 10000.0, params, prefix) : r.get_float("rope_theta", 10000.0));
    if (!scaling) return;
    if (!scaling->is_object()) fail("{}: {}: expected an object", r.source, prefix.substr(0, prefix.size() - 1));
    std::string type = "default";
    for (const char* key : {"rope_type", "type"})
        if (const json* t = r.find(*scaling, key); t && t->is_string()) type = t->get<std::string>();
    if (type == "default") return;
    if (c.head_dim <= 0 || c.head_dim % 2 != 0) return;  // validation reports it
    if (type == "linear") {
        float factor = float(r.get_float("factor", std::nullopt, scaling, prefix));
        if (!(factor > 0)) fail("{}: {}factor: {} must be positive", r.source, prefix, factor);
        c.rope_freq_factors.assign(size_t(c.head_dim / 2), factor);
        c.rope_scaling = fmt::format("linear (factor {})", factor);
    } else if (type == "llama3") {
        float factor = float(r.get_float("factor", std::nullopt, scaling, prefix));
        float low = float(r.get_float("low_freq_factor", std::nullopt, scaling, prefix));
        float high = float(r.get_float("high_freq_factor", std::nullopt, scaling, prefix));
        int64_t original = r.get_int("original_max_position_embeddings", std::nullopt, scaling, prefix);
        c.rope_freq_factors = with_context(r.source + ": " + prefix + "rope_type",
                                           [&] { return llama3_rope_freq_factors(c.rope_base, c.head_dim, factor, low, high, original); });
        c.rope_scaling = fmt::format(
            "llama3 (factor {}, low_freq_factor {}, high_freq_factor {}, original_max_position_embeddings {})", factor,
            low, high, original);
    } else {
        fail("{}: {}rope_type: '{}' is unsupported (mk supports default, linear, llama3)", r.source, prefix, type);
    }
}

}  // namespace

ModelConfig config_from_hf_json(std::string_view json_text, const std::string& source) {
    json j = json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object", source);
    HfReader r{j, source};
    ModelConfig c;
    c.arch = arch_from_hf(r);
    if (const json* name = r.find(j, "_name_or_path"); name && name->is_string() && !name->get<std::string>().empty())
        c.name = name->get<std::string>();
    else
        c.name = std::filesystem::path(source).parent_path().filename().string();

    c.n_layers = r.get_int("num_hidden_layers");
    c.d_model = r.get_int("hidden_size");
    c.d_ff = r.get_int("intermediate_size");
    c.n_heads = r.get_int("num_attention_heads");
    c.n_kv_heads = r.get_int("num_key_value_heads", c.n_heads);
    if (c.n_heads <= 0) fail("{}: num_attention_heads: {} must be positive", source, c.n_heads);
    if (!r.find(j, "head_dim") && c.d_model % c.n_heads != 0)
        fail("{}: head_dim: absent, and {} heads do not divide hidden_size {}", source, c.n_heads, c.d_model);
    c.head_dim = r.get_int("head_dim", c.d_model / c.n_heads);
    c.vocab_size = r.get_int("vocab_size");
    c.context_length = r.get_int("max_position_embeddings");
    c.norm_eps = float(r.get_float("rms_norm_eps"));
    read_rope(r, c);
    c.tied_embeddings = r.get_bool("tie_word_embeddings", false);
    c.qkv_bias = c.arch == Arch::qwen2;
    c.qk_norm = c.arch == Arch::qwen3;

    if (const json* act = r.find(j, "hidden_act"); act && *act != "silu")
        fail("{}: hidden_act: {} is unsupported (mk implements silu)", source, act->dump());
    if (r.get_bool("attention_bias", false) && c.arch != Arch::qwen2)
        fail("{}: attention_bias: true is unsupported for {}", source, arch_name(c.arch));
    if (r.get_bool("mlp_bias", false)) fail("{}: mlp_bias: true is unsupported", source);
    if (r.get_bool("use_sliding_window", false)) fail("{}: use_sliding_window: true is unsupported", source);
    validate_config(c, source, hf_config_keys());
    return c;
}

ModelConfig config_from_hf_json_file(const std::filesystem::path& config_json) {
    std::string source = (config_json.parent_path().filename() / config_json.filename()).string();
    std::ifstream in(config_json, std::ios::binary);
    if (!in) fail("{}: cannot open", config_json.string());
    std::ostringstream text;
    text << in.rdbuf();
    ModelConfig c = config_from_hf_json(text.str(), source);
    if (c.name.empty()) c.name = config_json.parent_path().filename().string();
    return c;
}

}  // namespace mk

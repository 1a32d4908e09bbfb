// load_model: opens a GGUF file or an HF safetensors directory, checks every weight the config implies
// (presence, dtype, shape), and permutes rotate-half Q/K rows into mk's adjacent-pair layout.
#include "models/model.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/quant.hpp"
#include "models/safetensors.hpp"

namespace mk {

std::string_view format_name(ModelFormat format) { return format == ModelFormat::gguf ? "gguf" : "safetensors"; }

std::vector<WeightSpec> weight_specs(const ModelConfig& c) {
    std::vector<WeightSpec> specs;
    const int64_t d = c.d_model;
    specs.push_back({"token_embd.weight", "model.embed_tokens.weight", {c.vocab_size, d}, WeightKind::embedding, false,
                     -1, -1, nullptr, &Model::token_embedding});
    enum class WeightDim { none, d_model, q_dim, kv_dim, head_dim, d_ff };
    enum class Present { always, qkv_bias, qk_norm };
    auto size = [&](WeightDim dim) -> int64_t {
        switch (dim) {
            case WeightDim::d_model: return d;
            case WeightDim::q_dim: return c.q_dim();
            case WeightDim::kv_dim: return c.kv_dim();
            case WeightDim::head_dim: return c.head_dim;
            case WeightDim::d_ff: return c.d_ff;
            case WeightDim::none: break;
        }
        return 0;
    };
    auto present = [&](Present p) { return p == Present::always || (p == Present::qkv_bias ? c.qkv_bias : c.qk_norm); };
    auto shape = [&](WeightDim out, WeightDim in) {
        return in == WeightDim::none ? std::vector<int64_t>{size(out)} : std::vector<int64_t>{size(out), size(in)};
    };
    for (int64_t l = 0; l < c.n_layers; ++l) {
        int index = 0;
#define MK_LAYER_WEIGHT(field, gguf, hf, kind, out, in, rope_rows, split, when)                                        \
    if (present(Present::when))                                                                                    \
        specs.push_back({fmt::format("blk.{}.{}", l, gguf), fmt::format("model.layers.{}.{}", l, hf),                 \
                         shape(WeightDim::out, WeightDim::in), WeightKind::kind, rope_rows, int(l), index,            \
                         &LayerWeights::field, nullptr});                                                             \
    ++index;
#include "models/layer_weights.def"
#undef MK_LAYER_WEIGHT
    }
    specs.push_back({"output_norm.weight", "model.norm.weight", {d}, WeightKind::norm, false, -1, -1, nullptr, &Model::output_norm});
    if (!c.tied_embeddings)
        specs.push_back({"output.weight", "lm_head.weight", {c.vocab_size, d}, WeightKind::matrix, false, -1, -1, nullptr,
                         &Model::lm_head});
    return specs;
}

void permute_rope_rows(const uint8_t* src, uint8_t* dst, int64_t n_rows, size_t row_bytes, int64_t head_dim,
                       bool to_adjacent) {
    if (head_dim <= 0 || head_dim % 2 != 0 || n_rows % head_dim != 0)
        fail("RoPE row permutation: {} rows are not whole heads of even head_dim {}", n_rows, head_dim);
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < n_rows / head_dim; ++h) {
        const uint8_t* s = src + size_t(h * head_dim) * row_bytes;
        uint8_t* o = dst + size_t(h * head_dim) * row_bytes;
        for (int64_t i = 0; i < half; ++i)
            for (int64_t j = 0; j < 2; ++j) {
                int64_t adjacent = 2 * i + j, rotate_half = j * half + i;
                int64_t from = to_adjacent ? rotate_half : adjacent, to = to_adjacent ? adjacent : rotate_half;
                std::memcpy(o + size_t(to) * row_bytes, s + size_t(from) * row_bytes, row_bytes);
            }
    }
}

std::vector<const TensorView*> Model::weights() const {
    std::vector<const TensorView*> out = {&token_embedding};
    for (const LayerWeights& l : layers)
        for (TensorView LayerWeights::*field : kLayerWeightFields)
            if ((l.*field).data) out.push_back(&(l.*field));
    out.push_back(&output_norm);
    if (!config.tied_embeddings) out.push_back(&lm_head);
    return out;
}

namespace {

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path.string());
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// tokenizer_config.json's chat_template (a string, or a list of {name, template}), else chat_template.jinja.
std::string hf_chat_template(const std::filesystem::path& dir) {
    if (std::filesystem::exists(dir / "tokenizer_config.json")) {
        auto j = nlohmann::json::parse(read_text(dir / "tokenizer_config.json"), nullptr, false);
        if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object", (dir / "tokenizer_config.json").string());
        auto it = j.find("chat_template");
        if (it != j.end() && it->is_string()) return it->get<std::string>();
        if (it != j.end() && it->is_array()) {
            for (const auto& t : *it)
                if (t.is_object() && t.value("name", "") == "default" && t.contains("template")) return t["template"].get<std::string>();
            if (!it->empty() && (*it)[0].is_object() && (*it)[0].contains("template")) return (*it)[0]["template"].get<std::string>();
        }
    }
    if (std::filesystem::exists(dir / "chat_template.jinja")) return read_text(dir / "chat_template.jinja");
    return "";
}

// Checks one tensor against its spec; `file` names the file for errors.
void check_tensor(const TensorView& t, const WeightSpec& spec, const std::string& file) {
    if (t.shape != spec.shape)
        fail("{}: tensor {}: expected shape {}, got {}", file, t.name, shape_string(spec.shape), shape_string(t.shape));
    if ((spec.kind == WeightKind::norm || spec.kind == WeightKind::bias) && !is_float(t.dtype))
        fail("{}: tensor {}: expected F32, F16 or BF16, got {}", file, t.name, dtype_name(t.dtype));
    size_t want = with_context(file + ": tensor " + t.name, [&] { return row_bytes(t.dtype, t.row_length()); }) * size_t(t.n_rows());
    if (t.n_bytes != want) fail("{}: tensor {}: holds {} bytes, {} {} needs {}", file, t.name, t.n_bytes, dtype_name(t.dtype),
                                shape_string(t.shape), want);
}

// Fills the model's views from `fetch` (name -> view, throwing when missing) and checks them.
void attach_weights(Model& m, bool permute, const std::function<TensorView(const std::string&)>& fetch,
                    const std::function<std::string(const std::string&)>& file_of) {
    m.layers.assign(size_t(m.config.n_layers), LayerWeights{});
    for (const WeightSpec& spec : weight_specs(m.config)) {
        const std::string& name = m.format == ModelFormat::gguf ? spec.gguf_name : spec.hf_name;
        TensorView t = fetch(name);
        check_tensor(t, spec, file_of(name));
        if (permute && spec.rope_rows) {
            size_t row = spec.shape.size() == 1 ? t.n_bytes / size_t(spec.shape[0]) : t.row_bytes();
            auto& buffer = m.owned.emplace_back(t.n_bytes);  // same shape, dtype and size as stored; rows reordered
            permute_rope_rows(t.data, buffer.data(), spec.shape[0], row, m.config.head_dim, true);
            t.data = buffer.data();
        }
        if (spec.layer >= 0)
            m.layers[size_t(spec.layer)].*spec.layer_field = t;
        else
            m.*spec.model_field = t;
    }
    if (m.config.tied_embeddings) m.lm_head = m.token_embedding;
    m.qk_rows_permuted = permute;
}

void finish(Model& m) {
    if (int64_t(m.tokenizer.vocab_size()) > m.config.vocab_size)
        fail("{}: the tokenizer has {} tokens, more than the {} embedding rows", m.path.string(), m.tokenizer.vocab_size(),
             m.config.vocab_size);
    m.total_weight_bytes = 0;
    for (const TensorView* t : m.weights()) m.total_weight_bytes += t->n_bytes;
    // The embedding row a token gathers is negligible; a tied embedding is read whole as the LM head.
    m.per_token_weight_bytes = m.total_weight_bytes - m.token_embedding.n_bytes;
    if (m.config.tied_embeddings) m.per_token_weight_bytes += m.lm_head.n_bytes;
}

Model load_gguf(const std::filesystem::path& path) {
    GgufFile file = GgufFile::open(path);
    ModelConfig config = config_from_gguf(file);
    Model m(Tokenizer::from_gguf(file));
    m.config = std::move(config);
    m.path = path;
    m.format = ModelFormat::gguf;
    m.chat_template = file.get_string("tokenizer.chat_template", "");
    m.mappings.push_back(file.mapping());
    // GGUF Llama rows are already adjacent-pair (the converter permuted them); qwen2/qwen3 keep HF's rotate-half.
    attach_weights(m, m.config.arch != Arch::llama, [&](const std::string& name) {
        if (!file.find_tensor(name)) fail("{}: tensor {}: missing", file.name(), name);
        return file.tensor(name);
    }, [&](const std::string&) { return file.name(); });
    finish(m);
    return m;
}

Model load_hf(const std::filesystem::path& dir) {
    ModelConfig config = config_from_hf_json_file(dir / "config.json");
    if (!std::filesystem::exists(dir / "tokenizer.json")) fail("{}: tokenizer.json: missing", dir.string());
    SafetensorsModel st = SafetensorsModel::open(dir);
    Model m(Tokenizer::from_hf_json(dir / "tokenizer.json"));
    m.config = std::move(config);
    m.path = dir;
    m.format = ModelFormat::safetensors;
    m.chat_template = hf_chat_template(dir);
    for (const SafetensorsFile& f : st.files()) m.mappings.push_back(f.mapping());
    const std::string index_name = st.files().size() == 1 ? st.files()[0].name() : "model.safetensors.index.json";
    auto file_of = [&](const std::string& name) { return st.find_tensor(name) ? st.file_of(name).name() : index_name; };
    attach_weights(m, true, [&](const std::string& name) {
        if (!st.find_tensor(name)) fail("{}: tensor {}: missing", index_name, name);
        return st.tensor(name);
    }, file_of);
    finish(m);
    return m;
}

}  // namespace

Model load_model(const std::filesystem::path& path) {
    // A path to a directory's model.safetensors or config.json means the directory.
    if (path.extension() == ".safetensors" || path.filename() == "config.json") {
        std::filesystem::path dir = path.parent_path();
        return load_model(dir.empty() ? std::filesystem::path(".") : dir);
    }
    if (std::filesystem::is_directory(path)) {
        if (!std::filesystem::exists(path / "config.json"))
            fail("{}: a model directory needs config.json (and model.safetensors, tokenizer.json)", path.string());
        return load_hf(path);
    }
    if (!std::filesystem::exists(path)) fail("{}: no such file or directory", path.string());
    return load_gguf(path);
}

}  // namespace mk

// mk info: what a model file holds — architecture, hyperparameters, tensors, bytes per token,
// tokenizer and chat template — as text or --json.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "models/chat_template.hpp"
#include "models/error.hpp"
#include "models/quant.hpp"
#include "runtime/model_source.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/tensor_parallel.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

std::string token_label(const Tokenizer& tok, int32_t id) {
    if (id < 0 || size_t(id) >= tok.vocab_size()) return "none";
    return fmt::format("{} {}", id, nlohmann::json(tok.data().tokens[id]).dump());
}

// The --tp sizes the model splits into (check_tp: they divide the KV heads and the FFN width, and the
// column slices are whole blocks).
nlohmann::json tp_sizes(const Model& m) {
    nlohmann::json sizes = nlohmann::json::array();
    const ModelDims dims = model_dims(m.config);
    const std::vector<WeightFormat> formats = weight_formats(m);
    for (uint32_t tp = 1; tp <= std::min<uint32_t>(dims.n_kv_heads, 64); ++tp) {
        try {
            check_tp(dims, formats, tp);
            sizes.push_back(tp);
        } catch (const Error&) {
        }
    }
    return sizes;
}

nlohmann::json describe_model(const Model& m) {
    const ModelConfig& c = m.config;
    std::map<std::string, int> dtypes;
    size_t n_tensors = 0;
    for (const TensorView* t : m.weights()) {
        dtypes[std::string(dtype_name(t->dtype))]++;
        n_tensors++;
    }
    std::string chat_family;
    try {
        chat_family = m.chat_template.empty() ? "none" : chat_family_name(detect_chat_family(m.chat_template));
    } catch (const Error& e) {
        chat_family = fmt::format("unsupported ({})", e.what());
    }
    const TokenizerData& td = m.tokenizer.data();
    nlohmann::json eog = nlohmann::json::array();
    for (int32_t id : td.eog_ids) eog.push_back(token_label(m.tokenizer, id));
    return {
        {"path", m.path.string()},
        {"format", std::string(format_name(m.format))},
        {"architecture", std::string(arch_name(c.arch))},
        {"name", c.name},
        {"n_layers", c.n_layers},
        {"d_model", c.d_model},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"head_dim", c.head_dim},
        {"d_ff", c.d_ff},
        {"vocab_size", c.vocab_size},
        {"context_length", c.context_length},
        {"rope_base", c.rope_base},
        {"rope_scaling", c.rope_scaling},
        {"norm_eps", c.norm_eps},
        {"tied_embeddings", c.tied_embeddings},
        {"qkv_bias", c.qkv_bias},
        {"qk_norm", c.qk_norm},
        {"qk_rows_permuted_at_load", m.qk_rows_permuted},
        {"config_hash", fmt::format("{:016x}", c.hash())},
        {"n_tensors", n_tensors},
        {"tensor_types", dtypes},
        {"total_weight_bytes", m.total_weight_bytes},
        {"per_token_weight_bytes", m.per_token_weight_bytes},
        {"tp_sizes", tp_sizes(m)},
        {"tokenizer",
         {{"kind", td.kind == TokenizerKind::byte_bpe ? "byte-level BPE" : "SentencePiece BPE"},
          {"pre", td.pre},
          {"vocab_size", m.tokenizer.vocab_size()},
          {"merges", td.merges.size()},
          {"bos", token_label(m.tokenizer, td.bos_id)},
          {"eos", token_label(m.tokenizer, td.eos_id)},
          {"unk", token_label(m.tokenizer, td.unk_id)},
          {"pad", token_label(m.tokenizer, td.pad_id)},
          {"add_bos", td.add_bos},
          {"end_of_generation", eog}}},
        {"chat_template", chat_family},
    };
}

void print_text(const nlohmann::json& j) {
    auto line = [](const char* key, const std::string& value) { fmt::print("{:<26} {}\n", key, value); };
    auto str = [&](const char* key) { return j[key].is_string() ? j[key].get<std::string>() : j[key].dump(); };
    for (const char* key : {"path", "format", "architecture", "name", "n_layers", "d_model", "n_heads", "n_kv_heads",
                            "head_dim", "d_ff", "vocab_size", "context_length", "rope_base", "rope_scaling", "norm_eps",
                            "tied_embeddings", "qkv_bias", "qk_norm", "qk_rows_permuted_at_load", "config_hash",
                            "n_tensors"})
        line(key, str(key));
    std::string types;
    for (auto& [name, count] : j["tensor_types"].items()) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, count.get<int>());
    line("tensor_types", types);
    line("total_weight_bytes", fmt::format("{} ({:.1f} MB)", j["total_weight_bytes"].get<uint64_t>(), j["total_weight_bytes"].get<uint64_t>() / 1e6));
    line("per_token_weight_bytes", fmt::format("{} ({:.1f} MB read per token)", j["per_token_weight_bytes"].get<uint64_t>(), j["per_token_weight_bytes"].get<uint64_t>() / 1e6));
    std::string sizes;
    for (const auto& tp : j["tp_sizes"]) sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ", tp.get<uint32_t>());
    line("tp_sizes", fmt::format("{} (--tp N: N divides the KV heads and the FFN, slices are whole blocks)", sizes));
    for (auto& [key, value] : j["tokenizer"].items())
        line(fmt::format("tokenizer.{}", key).c_str(), value.is_string() ? value.get<std::string>() : value.dump());
    line("chat_template", str("chat_template"));
}

}  // namespace

void register_info(CLI::App& app) {
    struct Options {
        std::string model;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("info", "Describe a model: architecture, hyperparameters, tensors, tokenizer");
    cmd->add_option("model,-m,--model", opts->model,
                    "A .gguf file, an HF directory, or a synthetic spec (default: the cached SmolLM2-135M-Instruct)");
    cmd->add_flag("--json", opts->json, "Print JSON instead of text");
    cmd->callback([opts] {
        Model model = open_model(opts->model);
        nlohmann::json j = describe_model(model);
        if (opts->json) fmt::print("{}\n", j.dump(2));
        else print_text(j);
    });
}

}  // namespace mk::tools

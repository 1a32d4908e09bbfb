// mk::api::Model: a loaded model (weights mapped read-only, tokenizer, chat template). Immutable
// after load and shared: copies are cheap handles, and sessions keep their model alive.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mk/options.hpp"
#include "mk/schedule.hpp"

namespace mk::api {

class Session;

struct ModelInfo {
    std::string name;          // general.name, or the file / directory stem
    std::string architecture;  // llama | qwen2 | qwen3
    std::string format;        // gguf | safetensors
    std::string path;          // the file or directory loaded (synthetic specs: the written file)
    int64_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, context_length = 0;
    uint64_t weight_bytes = 0;            // every distinct weight tensor once
    uint64_t weight_bytes_per_token = 0;  // what one decode step reads
    uint64_t n_params = 0;                // elements of every distinct weight tensor
    bool has_chat_template = false;
};

// Special token ids (-1: the model has none); eog lists every id that ends generation.
struct SpecialTokens {
    int32_t bos = -1, eos = -1, unk = -1, pad = -1;
    bool add_bos = false;  // tokenize() prepends bos
    std::vector<int32_t> eog;
};

struct ChatMessage {
    std::string role;  // system | user | assistant
    std::string content;
};

class Model {
public:
    // A .gguf file, an HF directory (config.json, *.safetensors, tokenizer.json), a synthetic spec
    // ("synthetic:llama-3.2-1b:bf16:layers=2", written once into $MK_CACHE/synthetic/), or "" for the
    // default model in the cache (tools/setup.sh fetches it).
    static Model load(const std::string& path_or_spec = "");

    ModelInfo info() const;

    // Text to ids; special tokens spelled in the text ("<|im_start|>") become their ids, and BOS is
    // prepended when the model's tokenizer asks for it.
    // add_bos = false leaves BOS out (text that continues a sequence).
    std::vector<int32_t> tokenize(std::string_view text, bool add_bos = true) const;
    std::string detokenize(std::span<const int32_t> tokens) const;
    std::string token_to_piece(int32_t token) const;  // the bytes it stands for ("" for control tokens)
    bool is_end_of_generation(int32_t token) const;
    SpecialTokens special_tokens() const;
    // The conversation rendered by the model's own chat template (ChatML or Llama 3), ready to tokenize.
    std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

    // Compiles (and verifies) the decode step for options' target and policy; or loads schedule_file.
    Schedule compile(const BackendOptions& options = {}) const;
    // A session with its own KV cache and activations, running a schedule compiled as compile() would.
    Session new_session(const BackendOptions& options = {}) const;
    // A session running `schedule`, which must have been compiled for this model's configuration.
    Session new_session(const Schedule& schedule, const BackendOptions& options = {}) const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_;
};

}  // namespace mk::api

// Engine::generate (see engine.hpp).
#include "runtime/engine.hpp"

#include <chrono>

#include "models/error.hpp"

namespace mk {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Engine::Engine(const Model& model, std::unique_ptr<Program> program) : model_(&model), program_(std::move(program)) {}

GenerateStats Engine::generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextCallback& on_text) {
    if (prompt.empty()) fail("the prompt is empty: nothing to continue");
    const uint32_t ctx = program_->ctx_len();
    if (prompt.size() >= ctx)
        fail("the prompt has {} tokens but the context holds {}; shorten it or raise -c", prompt.size(), ctx);
    const int32_t vocab = int32_t(model_->config.vocab_size);
    for (int32_t id : prompt)
        if (id < 0 || id >= vocab) fail("prompt token id {} is outside the vocabulary ({})", id, vocab);

    GenerateStats stats;
    stats.n_prompt = int32_t(prompt.size());
    std::vector<int32_t> history(prompt.begin(), prompt.end());
    program_->reset();

    auto t0 = std::chrono::steady_clock::now();
    int32_t next = -1;
    for (size_t i = 0; i < prompt.size(); ++i) {
        // The penalty sees every token in the context, the one being run included (as in generation).
        next = program_->step(prompt[i], int32_t(i), options.sampling, std::span(history.data(), i + 1));
        stats.n_past = int32_t(i) + 1;
        if (options.cancel && options.cancel->load()) {
            stats.cancelled = true;
            break;
        }
    }
    stats.prompt_ms = ms_since(t0);

    StreamDecoder decoder(model_->tokenizer);
    t0 = std::chrono::steady_clock::now();
    int32_t pos = int32_t(prompt.size());
    while (!stats.cancelled && stats.n_generated < options.n_predict) {
        if (options.stop_at_eog && model_->tokenizer.is_eog(next)) {
            stats.stopped_at_eog = true;
            break;
        }
        stats.tokens.push_back(next);
        history.push_back(next);
        stats.n_generated++;
        if (std::string piece = decoder.push(next); !piece.empty() && !on_text(piece)) break;
        if (stats.n_generated == options.n_predict || uint32_t(pos) + 1 >= ctx) break;
        next = program_->step(next, pos++, options.sampling, history);
        stats.n_eval_steps++;
        stats.n_past = pos;
        if (options.cancel && options.cancel->load()) stats.cancelled = true;
    }
    if (std::string rest = decoder.flush(); !rest.empty()) on_text(rest);
    stats.eval_ms = ms_since(t0);
    return stats;
}

}  // namespace mk

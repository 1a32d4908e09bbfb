// Engine::generate (see engine.hpp).
#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>

#include "instructions/sample/sampling.hpp"
#include "models/error.hpp"

namespace mk {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Engine::Engine(const Model& model, std::unique_ptr<Program> program) : model_(&model), program_(std::move(program)) {}

DeviceLoopResult Program::run_generation(std::span<const int32_t>, uint32_t, std::span<const int32_t>,
                                         const std::function<bool(int32_t)>&, const std::atomic<bool>*) {
    fail("backend {} has no device-side generation loop", backend_name());
}

void Engine::check_prompt(std::span<const int32_t> prompt, size_t n_past) const {
    if (prompt.empty()) fail("the prompt is empty: nothing to continue");
    const uint32_t ctx = program_->ctx_len();
    if (n_past + prompt.size() >= ctx) {
        if (n_past == 0) fail("the prompt has {} tokens but the context holds {}; shorten it or raise -c", prompt.size(), ctx);
        fail("the prompt has {} tokens after {} in the context, which holds {}; start afresh or raise -c", prompt.size(),
             n_past, ctx);
    }
    const int32_t vocab = int32_t(model_->config.vocab_size);
    for (int32_t id : prompt)
        if (id < 0 || id >= vocab) fail("prompt token id {} is outside the vocabulary ({})", id, vocab);
}

GenerateStats Engine::generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextCallback& on_text) {
    check_prompt(prompt, options.past.size());
    const uint32_t ctx = program_->ctx_len();
    const size_t n_past = options.past.size();

    if (n_past == 0) program_->reset();
    const std::vector<int32_t>& eog = model_->tokenizer.data().eog_ids;
    const size_t n_stop = options.stop_at_eog ? eog.size() : 0;
    // The device loop starts sequences; a continued one (chat turns) steps from the host.
    if (n_past == 0 && options.n_predict > 0 && program_->runs_generation(options.sampling, n_stop))
        return generate_on_device(prompt, options, on_text);

    GenerateStats stats;
    stats.n_prompt = int32_t(prompt.size());
    stats.n_past = int32_t(n_past);
    std::vector<int32_t> history(options.past.begin(), options.past.end());
    history.insert(history.end(), prompt.begin(), prompt.end());

    auto t0 = std::chrono::steady_clock::now();
    int32_t next = -1;
    // In prefill chunks where the program has a prefill schedule, else token by token.
    const uint32_t chunk = program_->prefill_tokens();
    for (size_t i = n_past; i < history.size();) {
        const size_t n = chunk ? std::min<size_t>(chunk, history.size() - i) : 1;
        ++stats.n_weight_passes;
        if (chunk) {
            program_->prefill(std::span(history.data() + i, n), int32_t(i));
        } else {
            // The penalty sees every token in the context, the one being run included (as in generation).
            next = program_->step(history[i], int32_t(i), options.sampling, std::span(history.data(), i + 1));
        }
        i += n;
        stats.n_past = int32_t(i);
        if (options.cancel && options.cancel->load()) {
            stats.cancelled = true;
            break;
        }
    }
    // A prefill does not sample: the decode step's rule and (seed, position) key, on the host.
    if (chunk && !stats.cancelled) {
        const std::span<const float> z = program_->logits();
        next = sample_token(z.data(), uint32_t(z.size()), options.sampling, history.data(), int32_t(history.size()),
                            int32_t(history.size()) - 1);
    }
    stats.prompt_ms = ms_since(t0);

    StreamDecoder decoder(model_->tokenizer);
    t0 = std::chrono::steady_clock::now();
    int32_t pos = int32_t(history.size());
    while (!stats.cancelled && stats.n_generated < options.n_predict) {
        if (options.stop_at_eog && model_->tokenizer.is_eog(next)) {
            stats.stopped_at_eog = true;
            break;
        }
        stats.tokens.push_back(next);
        history.push_back(next);
        stats.n_generated++;
        if (std::string piece = decoder.push(next); !piece.empty() && !on_text(piece)) break;
        if (stats.n_generated == options.n_predict) break;
        if (uint32_t(pos) + 1 >= ctx) {
            stats.context_full = true;
            break;
        }
        next = program_->step(next, pos++, options.sampling, history);
        stats.n_eval_steps++;
        stats.n_weight_passes++;
        stats.n_past = pos;
        if (options.cancel && options.cancel->load()) stats.cancelled = true;
    }
    if (std::string rest = decoder.flush(); !rest.empty()) on_text(rest);
    stats.eval_ms = ms_since(t0);
    return stats;
}

// The same generation as one device command (the resident kernel): the device samples, feeds each token
// back and stops at end-of-generation, -n or cancellation; the host streams the tokens as they land.
GenerateStats Engine::generate_on_device(std::span<const int32_t> prompt, const GenerateOptions& options,
                                         const TextCallback& on_text) {
    GenerateStats stats;
    const int32_t n_prompt = int32_t(prompt.size());
    stats.n_prompt = n_prompt;
    const uint32_t n_new = uint32_t(std::min<int64_t>(options.n_predict, int64_t(program_->ctx_len()) - n_prompt));
    const std::vector<int32_t> no_stops;
    const std::vector<int32_t>& stops = options.stop_at_eog ? model_->tokenizer.data().eog_ids : no_stops;
    StreamDecoder decoder(model_->tokenizer);
    bool listening = true;
    size_t n_streamed = 0;
    const DeviceLoopResult r = program_->run_generation(prompt, n_new, stops, [&](int32_t token) {
        if (options.stop_at_eog && model_->tokenizer.is_eog(token)) return true;  // the device stops after it
        if (!listening) return false;
        ++n_streamed;
        if (std::string piece = decoder.push(token); !piece.empty() && !on_text(piece)) listening = false;
        return listening;
    }, options.cancel);
    // Reported: every token that was streamed or run as an input (the KV cache holds n_steps positions);
    // an end-of-generation token is neither.
    const size_t n_run = r.n_steps > uint32_t(n_prompt) ? r.n_steps - uint32_t(n_prompt) : 0;
    size_t n_tokens = std::min(r.tokens.size(), std::max(n_streamed, n_run));
    // The device stops after the step that sampled it, so it is the last posted token and never run.
    stats.stopped_at_eog = options.stop_at_eog && r.tokens.size() == n_run + 1 && model_->tokenizer.is_eog(r.tokens.back());
    if (stats.stopped_at_eog) n_tokens = n_run;
    stats.tokens.assign(r.tokens.begin(), r.tokens.begin() + std::ptrdiff_t(n_tokens));
    for (size_t i = n_streamed; listening && i < n_tokens; ++i)
        if (std::string piece = decoder.push(stats.tokens[i]); !piece.empty() && !on_text(piece)) listening = false;
    if (std::string rest = decoder.flush(); !rest.empty() && listening) on_text(rest);
    stats.n_generated = int32_t(n_tokens);
    stats.n_past = int32_t(r.n_steps);
    stats.n_eval_steps = int32_t(n_run);
    stats.n_weight_passes = int32_t(r.n_passes);
    stats.context_full = n_new < uint32_t(options.n_predict) && n_tokens == n_new && !stats.stopped_at_eog && !r.cancelled;
    stats.cancelled = r.cancelled && options.cancel && options.cancel->load();
    // One command: the prompt's time runs to the first token, generation's from there to the end.
    stats.prompt_ms = r.tokens.empty() ? r.total_ms : r.first_token_ms;
    stats.eval_ms = r.total_ms - stats.prompt_ms;
    return stats;
}

}  // namespace mk

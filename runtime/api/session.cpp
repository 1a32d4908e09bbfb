// mk::api::Session (see mk/session.hpp): token feeding and sampling over a Program, and whole
// generations through the Engine.
#include "mk/session.hpp"

#include <algorithm>

#include "instructions/sample/sampling.hpp"
#include "runtime/api/impl.hpp"

namespace mk::api {

SamplingParams to_params(const SamplingOptions& o) {
    if (o.temperature < 0.0f || o.top_k < 0 || o.top_p < 0.0f || o.top_p > 1.0f || o.min_p < 0.0f || o.min_p > 1.0f ||
        o.repeat_penalty <= 0.0f || o.repeat_last_n < 0)
        fail("sampling options out of range: temperature {} top_k {} top_p {} min_p {} repeat_penalty {} repeat_last_n {}",
             o.temperature, o.top_k, o.top_p, o.min_p, o.repeat_penalty, o.repeat_last_n);
    SamplingParams p;
    p.temperature = o.temperature;
    p.top_k = o.top_k;
    p.top_p = o.top_p;
    p.min_p = o.min_p;
    p.repeat_penalty = o.repeat_penalty;
    p.repeat_last_n = o.repeat_last_n;
    p.seed = o.seed;
    return p;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

int32_t Session::feed(std::span<const int32_t> tokens, const SamplingOptions& sampling) {
    return guard("feed", [&] {
        const SamplingParams params = to_params(sampling);
        const mk::Model& model = impl_->model->model;
        Program& program = impl_->engine.program();
        if (tokens.empty()) fail("nothing to feed");
        for (int32_t id : tokens)
            if (id < 0 || id >= model.config.vocab_size)
                fail("token id {} is outside the vocabulary ({})", id, model.config.vocab_size);
        if (impl_->tokens.size() + tokens.size() > program.ctx_len())
            fail("{} tokens after {} do not fit the context of {}", tokens.size(), impl_->tokens.size(),
                 program.ctx_len());
        int32_t next = -1;
        impl_->fed_logits.clear();
        const uint32_t chunk = program.prefill_tokens();
        for (size_t i = 0; i < tokens.size();) {
            const size_t n = chunk ? std::min<size_t>(chunk, tokens.size() - i) : 1;
            const size_t pos = impl_->tokens.size();
            impl_->tokens.insert(impl_->tokens.end(), tokens.begin() + int64_t(i), tokens.begin() + int64_t(i + n));
            try {
                if (chunk) {
                    program.prefill(tokens.subspan(i, n), int32_t(pos));
                } else {
                    next = program.step(tokens[i], int32_t(pos), params, impl_->tokens);
                }
                impl_->has_logits = true;
            } catch (...) {
                impl_->tokens.resize(pos);
                impl_->has_logits = false;
                throw;
            }
            if (impl_->keep_all_logits) {
                const std::span<const float> z = chunk ? program.prefill_logits() : program.logits();
                impl_->fed_logits.insert(impl_->fed_logits.end(), z.begin(), z.end());
            }
            i += n;
        }
        // A prefill does not sample: the same rule and (seed, position) key as the backend's sampler, on the host.
        if (chunk) next = sample(sampling);
        return next;
    });
}

int32_t Session::feed_text(std::string_view text, const SamplingOptions& sampling) {
    const mk::Tokenizer& tok = impl_->model->model.tokenizer;
    std::vector<int32_t> ids = guard("tokenize", [&] { return tok.encode(text, true); });
    // BOS belongs at position 0 only.
    if (!impl_->tokens.empty() && !ids.empty() && ids.front() == tok.data().bos_id) ids.erase(ids.begin());
    return feed(ids, sampling);
}

std::span<const float> Session::logits() const {
    if (!impl_->has_logits) throw Error("logits: no token has run since the session started, was reset, truncated or loaded");
    return impl_->engine.program().logits();
}

std::span<const float> Session::feed_logits() const {
    if (!impl_->keep_all_logits) throw Error("feed_logits: the session keeps them only with BackendOptions::all_logits");
    return impl_->fed_logits;
}

int32_t Session::sample(const SamplingOptions& sampling) const {
    return guard("sample", [&] {
        const std::span<const float> z = logits();
        // The backend's sampler keys the draw by the position of the token just run.
        return sample_token(z.data(), uint32_t(z.size()), to_params(sampling), impl_->tokens.data(),
                            int32_t(impl_->tokens.size()), int32_t(impl_->tokens.size()) - 1);
    });
}

int32_t Session::n_past() const { return int32_t(impl_->tokens.size()); }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens; }
uint32_t Session::context_length() const { return impl_->engine.program().ctx_len(); }

void Session::reset() {
    impl_->engine.program().reset();
    impl_->tokens.clear();
    impl_->has_logits = false;
}

void Session::truncate(int32_t n_past) {
    guard("truncate", [&] {
        if (n_past < 0 || size_t(n_past) > impl_->tokens.size())
            fail("cannot keep {} tokens of {}", n_past, impl_->tokens.size());
        impl_->engine.program().truncate(uint32_t(n_past));
        impl_->tokens.resize(size_t(n_past));
        impl_->has_logits = false;  // they belong to the last token run, which may be gone
    });
}

GenerateResult Session::generate(std::string_view prompt, const GenerateOptions& options, const TextCallback& on_text) {
    std::string text(prompt);
    if (options.chat) {
        std::vector<ChatMessage> messages;
        if (!options.system.empty()) messages.push_back({"system", options.system});
        messages.push_back({"user", text});
        text = render_chat(impl_->model->model, messages, true);
    } else if (!options.system.empty()) {
        throw Error("generate: a system message needs chat = true");
    }
    const bool continues = options.append && !impl_->tokens.empty();  // BOS belongs at position 0 only
    const mk::Tokenizer& tok = impl_->model->model.tokenizer;
    std::vector<int32_t> ids = guard("tokenize", [&] { return tok.encode(text, true); });
    if (continues && !ids.empty() && ids.front() == tok.data().bos_id) ids.erase(ids.begin());
    return generate(std::span<const int32_t>(ids), options, on_text);
}

GenerateResult Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                 const TextCallback& on_text) {
    std::exception_ptr callback_error;  // the host's own exception: rethrown unchanged, outside the guard
    GenerateResult result = guard("generate", [&] {
        if (options.max_tokens < 0) fail("max_tokens is {}; it must be >= 0", options.max_tokens);
        mk::GenerateOptions go;
        go.n_predict = options.max_tokens;
        go.sampling = to_params(options.sampling);
        go.stop_at_eog = options.stop_at_end;
        go.cancel = &impl_->cancel;
        impl_->cancel.store(false);
        impl_->engine.check_prompt(prompt, options.append ? impl_->tokens.size() : 0);
        if (!options.append) impl_->tokens.clear();
        const std::vector<int32_t> past = std::move(impl_->tokens);
        go.past = past;
        impl_->tokens.clear();
        impl_->has_logits = false;

        GenerateResult r;
        bool listening = true;  // false once the host said stop (or threw): it hears nothing more
        auto forward = [&](std::string_view piece) {
            if (!listening) return false;
            r.text += piece;
            try {
                listening = !on_text || on_text(piece);
            } catch (...) {
                callback_error = std::current_exception();
                listening = false;
            }
            return listening;
        };
        GenerateStats stats;
        try {
            stats = impl_->engine.generate(prompt, go, forward);
        } catch (...) {
            impl_->engine.program().reset();  // the sequence is unknown after a failed step
            throw;
        }
        // The cache holds the past, the prompt and every generated token that was run (all but the last).
        const size_t n_past = size_t(stats.n_past);
        impl_->tokens = past;
        for (size_t i = 0; i < prompt.size() && impl_->tokens.size() < n_past; ++i) impl_->tokens.push_back(prompt[i]);
        for (size_t i = 0; impl_->tokens.size() < n_past; ++i) impl_->tokens.push_back(stats.tokens[i]);
        impl_->has_logits = n_past > past.size();

        r.tokens = std::move(stats.tokens);
        r.n_prompt = stats.n_prompt;
        r.n_eval_steps = stats.n_eval_steps;
        r.n_weight_passes = stats.n_weight_passes;
        r.n_past = stats.n_past;
        r.context_full = stats.context_full;
        r.prompt_ms = stats.prompt_ms;
        r.eval_ms = stats.eval_ms;
        r.stopped_at_end = stats.stopped_at_eog;
        r.cancelled = stats.cancelled;
        return r;
    });
    if (callback_error) std::rethrow_exception(callback_error);
    return result;
}

void Session::cancel() { impl_->cancel.store(true); }

std::string Session::backend() const { return impl_->engine.program().backend_name(); }
uint32_t Session::n_threads() const { return impl_->engine.program().n_threads(); }
uint32_t Session::prefill_chunk() const { return impl_->engine.program().prefill_tokens(); }

Schedule Session::schedule() const {
    auto impl = std::make_shared<Schedule::Impl>();
    impl->schedule = impl_->engine.program().schedule();
    return Schedule(std::move(impl));
}

}  // namespace mk::api

// mk::api::Session: one sequence on one backend, with its own KV cache. Feed tokens, read logits,
// sample, or run a whole streamed generation with back-pressure and cancellation.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mk/options.hpp"
#include "mk/schedule.hpp"

namespace mk::api {

struct GenerateResult {
    std::string text;             // everything passed to the callback
    std::vector<int32_t> tokens;  // the generated ids
    int32_t n_prompt = 0;         // prompt tokens (after the chat template)
    int32_t n_eval_steps = 0;     // decode steps after the prompt
    int32_t n_weight_passes = 0;  // steps that read the weights once: the prompt's prefill chunks (or its tokens, one
                                  // by one), then the decode steps
    int32_t n_past = 0;           // tokens in the KV cache afterwards (the last generated one is never run)
    double prompt_ms = 0.0, eval_ms = 0.0;
    bool stopped_at_end = false;  // an end-of-generation token
    bool cancelled = false;       // cancel() was called
    bool context_full = false;    // stopped because the context has no room for another step
    double prompt_tokens_per_s() const { return prompt_ms > 0 ? 1000.0 * n_prompt / prompt_ms : 0.0; }
    double eval_tokens_per_s() const { return eval_ms > 0 ? 1000.0 * n_eval_steps / eval_ms : 0.0; }
};

// Receives complete UTF-8 text as it is generated; return false to stop the generation there.
using TextCallback = std::function<bool(std::string_view piece)>;

// Thread safety: a Session is used by one thread at a time, except cancel(), which any thread may call.
// Separate CPU sessions (of one Model or of several) run on separate threads safely and give the same
// results as one after the other. On a GPU, a "cuda" Session's resident kernel holds every SM of its
// device for the Session's life, so sessions are not serialized through it: a second Session on that
// device (cuda, or a stepwise or cuda-kernels step) is refused with an mk::Error naming the first; end
// the first Session (destroy it) before starting the next. generate() on "cuda" runs the whole
// generation as one device command (greedy; other sampling steps per token, sampling on the host).
class Session {
public:
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    ~Session();

    // Runs `tokens` at the next positions and returns the token sampled after the last one, in prefill chunks of
    // prefill_chunk() tokens (each weight read once a chunk).
    int32_t feed(std::span<const int32_t> tokens, const SamplingOptions& sampling = {});
    int32_t step(int32_t token, const SamplingOptions& sampling = {}) { return feed({&token, 1}, sampling); }
    // Tokenizes `text` (BOS only at position 0) and feeds it.
    int32_t feed_text(std::string_view text, const SamplingOptions& sampling = {});

    // The logits after the last token fed: (vocab) fp32, valid until the next feed or generate.
    std::span<const float> logits() const;
    // With BackendOptions::all_logits: the logits of every token of the last feed, (tokens, vocab) fp32 row-major.
    std::span<const float> feed_logits() const;
    // Samples from logits() by the same rule and (seed, position) key as the backend's own sampler.
    int32_t sample(const SamplingOptions& sampling) const;

    int32_t n_past() const;                     // tokens in the KV cache
    const std::vector<int32_t>& tokens() const; // those tokens
    uint32_t context_length() const;
    void reset();                               // forget the sequence
    void truncate(int32_t n_past);              // keep the first n_past tokens (0 <= n_past <= n_past())

    // The tokens and KV cache, to a file that records the model (name, a hash of its configuration and weights), the
    // schedule's hash and the context length; load() refuses a file whose records differ from this
    // session's, naming what differs. After load() the next feed continues the saved sequence (logits()
    // needs a feed first). The CPU backend only, for now.
    void save(const std::string& path) const;
    void load(const std::string& path);

    // A whole generation: the prompt (wrapped in the chat template when options.chat), then up to
    // max_tokens tokens, each piece of text passed to on_text as it completes. It starts a fresh sequence,
    // or with options.append continues the one the session holds (only the prompt's tokens run; with chat,
    // the prompt is wrapped as a conversation of its own, so a multi-turn chat appends token ids instead).
    // Afterwards the session holds the prompt and the generated tokens it ran: the last generated token
    // has not run (put it first in the next appended prompt to keep it; an end-of-generation token is
    // not in `tokens`).
    GenerateResult generate(std::string_view prompt, const GenerateOptions& options, const TextCallback& on_text = {});
    GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                            const TextCallback& on_text = {});
    // Stops the generate() in progress after its current step; safe from any thread (a signal handler
    // should set its own flag instead). Each generate() starts uncancelled.
    void cancel();

    // "cpu", "cuda", "cuda-stepwise", "cuda-kernels+pdl", "cuda-kernels-graph+pdl"; on the CUDA emulator (cuda-emu,
    // cuda-kernels-emu) "cuda-emu", "cuda-emu-stepwise", "cuda-kernels-emu+pdl", "cuda-kernels-emu-graph+pdl".
    std::string backend() const;
    uint32_t n_threads() const;
    // The most prompt tokens one prefill step runs: BackendOptions::batch, or less where the backend holds less (the
    // CUDA backends: what each SM's scratch holds); 0 where prompts run token by token (batch 1).
    uint32_t prefill_chunk() const;
    Schedule schedule() const;

    struct Impl;
    explicit Session(std::unique_ptr<Impl> impl);

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace mk::api

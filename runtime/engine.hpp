// The generation loop over a Program: prompt tokens in prefill chunks where the program has a prefill schedule (else
// through the same step as generation), sampling, end-of-generation, streamed UTF-8 text, cancellation and timings. A Program that runs the loop on
// its device (the resident CUDA kernel) gets the whole generation as one run_generation call.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "models/model.hpp"
#include "runtime/program.hpp"

namespace mk {

struct GenerateOptions {
    int32_t n_predict = 128;  // tokens to generate at most
    SamplingParams sampling;
    bool stop_at_eog = true;
    const std::atomic<bool>* cancel = nullptr;  // set by another thread (e.g. Ctrl-C) to stop after this step
    // The tokens already in the program's KV cache (it runs at position past.size() next): the prompt
    // continues them. Empty: a fresh sequence (the program is reset).
    std::span<const int32_t> past;
};

struct GenerateStats {
    int32_t n_prompt = 0, n_generated = 0;
    int32_t n_eval_steps = 0;  // decode steps after the prompt (the first token comes from the prompt's last step)
    int32_t n_weight_passes = 0;  // steps that read the weights once: the prompt's prefill chunks or steps, then decode
    double prompt_ms = 0, eval_ms = 0;
    int32_t n_past = 0;  // positions in the KV cache when generate returned, past included (the last token is never run)
    bool stopped_at_eog = false, cancelled = false;
    bool context_full = false;  // stopped because the next step would not fit the context
    std::vector<int32_t> tokens;  // the generated ids
};

// on_text(piece): complete UTF-8 text as it becomes available; return false to stop.
using TextCallback = std::function<bool(std::string_view piece)>;

class Engine {
public:
    // The model must outlive the engine.
    Engine(const Model& model, std::unique_ptr<Program> program);

    GenerateStats generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextCallback& on_text);
    // What generate refuses before running anything: an empty prompt, ids outside the vocabulary, a
    // prompt that does not fit after n_past tokens.
    void check_prompt(std::span<const int32_t> prompt, size_t n_past) const;

    const Model& model() const { return *model_; }
    Program& program() { return *program_; }

private:
    GenerateStats generate_on_device(std::span<const int32_t> prompt, const GenerateOptions& options,
                                     const TextCallback& on_text);

    const Model* model_;
    std::unique_ptr<Program> program_;
};

}  // namespace mk

// A Program: one schedule bound to one model's weights on one backend, with its own activation
// arena and KV cache. step() runs one decode step (the same instructions for prompt and generation).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "instructions/op_context.hpp"
#include "models/model.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

// KV-cache positions when none are asked for: the model's context, at most 4096 (SmolLM2's fp32 cache at
// 4096 positions is 4096 x 30 layers x 2 x 192 x 4 B = 189 MB; its own 8192 would double that).
inline constexpr uint32_t kDefaultMaxCtxLen = 4096;
inline uint32_t default_ctx_len(uint32_t asked, const ModelConfig& config) {
    return asked ? asked : uint32_t(std::min<int64_t>(config.context_length, kDefaultMaxCtxLen));
}

struct ProgramOptions {
    uint32_t n_threads = 0;     // CPU worker threads; 0: one per core
    uint32_t ctx_len = 0;       // KV-cache positions; 0: default_ctx_len
    bool check_pages = false;   // CPU: stage weights through per-SM pages and check the accounting
    bool detect_races = false;  // CPU: vector-clock race detector
    CpuDots dots = CpuDots::exact;  // CPU: the matvec ops' dots (exact fp32, or q16 activations: faster)
};

// The one switch between device and host sampling in the device's generation loop: the device draws
// greedily; any other rule (temperature, top-k/p, min-p, repetition penalty) runs on the host over the
// copied logits until the device sampler has run under the CUDA emulator.
inline bool device_loop_samples(const SamplingParams& p) { return p.temperature <= 0.0f && p.repeat_penalty == 1.0f; }

// What a device-side generation did (Program::run_generation).
struct DeviceLoopResult {
    std::vector<int32_t> tokens;  // every posted token, in order: the first is the prompt's last step's
    uint32_t n_steps = 0;         // steps run, so KV positions filled (the last token is never run)
    uint32_t n_passes = 0;        // passes over the weights: the prompt's prefill chunks, then the device's steps
    bool stopped = false;         // ended before n_new tokens: a stop token or a cancellation
    bool cancelled = false;       // ended by the host (cancel, or on_token returned false)
    double first_token_ms = 0, total_ms = 0;  // from posting the command: the first token seen, the end
};

class Program {
public:
    virtual ~Program() = default;
    // Runs `token` at position `pos` (0-based; positions must follow each other from 0 after reset)
    // and returns the token sampled with `params`; history feeds the repetition penalty.
    virtual int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) = 0;
    // The logits of the last step: (vocab) fp32 (after a prefill: of its last token).
    virtual std::span<const float> logits() const = 0;
    // Multi-token prefill, where the program was built with a prefill schedule (make_cpu_program's `prefill`):
    // the largest chunk one prefill call runs (0: none; the prompt then runs token by token through step).
    virtual uint32_t prefill_tokens() const { return 0; }
    // Whether prefill_logits() gives every token's logits (a prefill schedule compiled with all_logits).
    virtual bool prefill_all_logits() const { return false; }
    // Runs tokens (1 to prefill_tokens()) at positions pos, pos + 1, ... in one step, as that many steps would,
    // without sampling; positions follow the previous step's as in step().
    virtual void prefill(std::span<const int32_t> tokens, int32_t pos);
    // After a prefill with all logits: (n_tokens, vocab) fp32, token j's logits at row j.
    virtual std::span<const float> prefill_logits() const;
    // Forgets the sequence (a new generation starts at position 0).
    virtual void reset() = 0;
    // Keeps the first n_past positions (at most those run): the next step runs at position n_past.
    virtual void truncate(uint32_t n_past);
    // The KV cache of positions [0, n_past) in kv_layout order, for saving a session's state; write_kv
    // restores it and positions the program at n_past. The default refuses (the backend keeps no host copy).
    virtual void read_kv(uint32_t n_past, std::span<float> k, std::span<float> v) const;
    virtual void write_kv(uint32_t n_past, std::span<const float> k, std::span<const float> v);
    virtual const Schedule& schedule() const = 0;
    virtual uint32_t ctx_len() const = 0;
    virtual const char* backend_name() const = 0;
    virtual uint32_t n_threads() const = 0;

    // Whether run_generation serves these parameters with n_stop stop tokens (the resident CUDA kernel).
    virtual bool runs_generation(const SamplingParams&, size_t /*n_stop*/) const { return false; }
    // One command for the whole generation, from the current position: the prompt, then up to n_new
    // tokens the device samples and feeds back itself, ending after a step that samples a stop token.
    // on_token sees each token as it lands (false: stop after the running step); *cancel likewise.
    virtual DeviceLoopResult run_generation(std::span<const int32_t> prompt, uint32_t n_new,
                                            std::span<const int32_t> stop_tokens,
                                            const std::function<bool(int32_t)>& on_token,
                                            const std::atomic<bool>* cancel);
};

// The host layout of read_kv / write_kv: (n_layers, n_kv_heads, n_past, head_dim) fp32 for K and for V
// (a tensor-parallel schedule's layers are its ranks' stacked layers).
uint64_t kv_floats(const Schedule& schedule, uint32_t n_past);

// The CPU backend. Throws mk::Error when the schedule does not fit the model or the memory. `prefill`, when
// given, is a prefill schedule (compile_prefill_schedule) for the same model and weight formats: the program's
// prefill() runs it over the same weights and KV cache.
std::unique_ptr<Program> make_cpu_program(const Model& model, Schedule schedule, const ProgramOptions& options,
                                          std::optional<Schedule> prefill = std::nullopt);

}  // namespace mk

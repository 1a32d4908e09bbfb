// A Program: one schedule bound to one model's weights on one backend, with its own activation
// arena and KV cache. step() runs one decode step (the same instructions for prompt and generation).
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "instructions/op_context.hpp"
#include "models/model.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct ProgramOptions {
    uint32_t n_threads = 0;     // CPU worker threads; 0: one per core
    uint32_t ctx_len = 0;       // KV-cache positions; 0: min(model context, 4096)
    bool check_pages = false;   // CPU: stage weights through per-SM pages and check the accounting
    bool detect_races = false;  // CPU: vector-clock race detector
    CpuDots dots = CpuDots::exact;  // CPU: the matvec ops' dots (exact fp32, or q16 activations: faster)
};

class Program {
public:
    virtual ~Program() = default;
    // Runs `token` at position `pos` (0-based; positions must follow each other from 0 after reset)
    // and returns the token sampled with `params`; history feeds the repetition penalty.
    virtual int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) = 0;
    // The logits of the last step: (vocab) fp32.
    virtual std::span<const float> logits() const = 0;
    // Forgets the sequence (a new generation starts at position 0).
    virtual void reset() = 0;
    virtual const Schedule& schedule() const = 0;
    virtual uint32_t ctx_len() const = 0;
    virtual const char* backend_name() const = 0;
    virtual uint32_t n_threads() const = 0;
};

// The CPU backend. Throws mk::Error when the schedule does not fit the model or the memory.
std::unique_ptr<Program> make_cpu_program(const Model& model, Schedule schedule, const ProgramOptions& options);

}  // namespace mk

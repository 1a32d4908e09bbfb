// The CPU backend's interpreter: runs any valid schedule as the GPU would, one virtual SM per
// stream multiplexed onto a few worker threads, ordered only by the schedule's counters.
// Optional checked page accounting and a vector-clock race detector; stalls are reported, never hung.
#pragma once
#include <cstdint>
#include <memory>

#include "instructions/op_context.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

// The memory a schedule runs over; the interpreter reads and writes it but does not own it.
struct ProgramMemory {
    uint8_t* arena = nullptr;              // schedule.arena_bytes of activation buffers
    const WeightRef* weights = nullptr;    // schedule.weights.size() entries, by weight id
    float* k_cache = nullptr;              // (n_layers, n_kv_heads, ctx_len, head_dim) fp32, or null
    float* v_cache = nullptr;              // (n_layers, n_kv_heads, ctx_len, head_dim) fp32, or null
    uint32_t ctx_len = 0;
    const float* rope_inv_freq = nullptr;  // (head_dim / 2) fp32
    // Tensor parallel, optional: tp_size arenas of rank_arena_bytes, each biased by its rank's region start
    // (rank_biased, instructions/device.cuh) so the schedule's offsets index it, as separate GPUs would hold them; null: every
    // rank's region is in `arena`.
    uint8_t* const* rank_arenas = nullptr;
};

struct InterpreterOptions {
    uint32_t n_threads = 1;     // worker threads, the caller of run_step included; 0: one per core
    bool check_pages = false;   // stage tiles through per-SM pages and check the page accounting
    bool detect_races = false;  // vector-clock check of every arena / KV access against the counters
    CpuDots dots = CpuDots::exact;  // the matvec ops' dot mode (OpContext::dots)
};

class Interpreter {
public:
    // Validates the schedule against the memory (opcodes, counters, regions, page plans, weight
    // formats, per-step counter totals) and starts n_threads - 1 helper threads. Throws mk::Error.
    Interpreter(Schedule schedule, const ProgramMemory& memory, InterpreterOptions options = {});
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    // Runs every stream to its end for step `step.epoch`. The counters must stand at that epoch's
    // start (each at epoch * step_total); they are never reset. Throws mk::Error naming the
    // instruction on an op failure, a page misuse or a race, and with a stall report when no
    // stream can progress. After a failure the counters are mid-step: run_step refuses to run
    // until reset(). Not reentrant: one run_step at a time.
    void run_step(StepState& step);
    // Sets every counter to the start of step `epoch` (a new generation, or recovery after a failure).
    void reset(uint32_t epoch = 0);

    uint64_t counter_value(uint32_t counter) const;
    const Schedule& schedule() const;
    // The page plan instruction `index` of stream `sm` runs with.
    const PagePlan& page_plan(uint32_t sm, uint32_t index) const;
    uint32_t n_threads() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mk

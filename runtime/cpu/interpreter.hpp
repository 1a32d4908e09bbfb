// The CPU backend's interpreter: runs any valid schedule as the GPU would, one virtual SM per
// stream multiplexed onto a few worker threads, ordered only by the schedule's counters.
// Optional checked page accounting and a vector-clock race detector; stalls are reported, never hung.
#pragma once
#include <cstdint>
#include <memory>

#include "instructions/op_context.hpp"
#include "runtime/program_memory.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

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

// mk::api::Schedule: a compiled, verified decode step (per-SM instruction streams) that can be saved
// as .mks, loaded, inspected and handed to Model::new_session. Immutable; cheap to copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mk::api {

struct ScheduleInfo {
    std::string target;       // "h200", "cpu", "custom"
    std::string policy;       // critical-path | round-robin
    uint32_t n_sms = 0;       // streams (all ranks')
    uint32_t tp = 1;          // tensor-parallel ranks
    size_t n_instructions = 0;
    size_t n_counters = 0;
    uint64_t arena_bytes = 0; // activation arena
    uint64_t config_hash = 0; // of the model it was compiled for
};

// The target's cost model run over one step (see scheduler/simulate.hpp).
struct ScheduleSimulation {
    double step_us = 0.0;     // predicted time of one decode step
    double weight_gbs = 0.0;  // weight bytes streamed per step (all ranks) / step time
};

class Schedule {
public:
    // Reads a .mks file and verifies it; throws mk::Error naming the file and the fault.
    static Schedule load(const std::string& path);
    void save(const std::string& path) const;

    ScheduleInfo info() const;
    ScheduleSimulation simulate(uint32_t position = 511) const;
    std::string to_json() const;        // every instruction with its op, waits, signals and args
    std::string verify_summary() const; // the verifier's report: "ok: ..." (a loaded or compiled schedule is ok)

    struct Impl;
    explicit Schedule(std::shared_ptr<const Impl> impl);
    const Impl& impl() const { return *impl_; }

private:
    std::shared_ptr<const Impl> impl_;
};

}  // namespace mk::api

// Discrete-event simulation of one step under the target's cost model: every SM runs its stream in
// order, an instruction takes node_duration_ns of its cost, and a wait is met dependency_ns after the
// signal that completes it (immediately from the same SM, hop_ns within a rank, link_ns across ranks).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/device_cost.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct SimOptions {
    // The step's last token's position: ops that read the KV cache up to pos (attention) cost in proportion to
    // the positions they see against the nominal 512-token context their cost() assumes. A prefill chunk of T
    // tokens ends there (starting at position + 1 - T, at 0 when that is negative): 511 is a 512-token prompt.
    uint32_t position = 511;
    // Tensor parallel: price the exchange at nothing — transfers take no time and a cross-rank signal is
    // seen after hop_ns, as if the ranks shared one GPU. The baseline summarize_exchange compares against.
    bool free_exchange = false;
    // The resident CUDA interpreter's cost model (device_cost.hpp) instead of the ideal one (node_duration_ns):
    // per-instruction overhead, tiles by busy warps, attention trips, late polls and the step boundary.
    const DeviceModel* device = nullptr;
};

struct SimEvent {
    double ready_ns = 0.0;  // when its waits were met (0 without waits)
    double start_ns = 0.0, end_ns = 0.0;
    // The instruction whose signal set start_ns (sm UINT32_MAX when the SM's previous instruction did).
    uint32_t waited_sm = UINT32_MAX, waited_index = 0;
};

struct SmTime {
    double busy_ns = 0.0;  // running instructions
    double wait_ns = 0.0;  // free but blocked on a wait
    double idle_ns = 0.0;  // done with its stream before the step ended
};

struct OpTotal {
    std::string name;
    uint32_t count = 0;
    double busy_ns = 0.0;
    uint64_t weight_bytes = 0, activation_bytes = 0, flops = 0;
    // With the device model: the parts of busy_ns (overhead and consume serial; load overlaps them).
    double overhead_ns = 0.0, consume_ns = 0.0, load_ns = 0.0;
};

struct Simulation {
    double makespan_ns = 0.0;
    std::vector<std::vector<SimEvent>> timeline;  // [sm][index]
    std::vector<SmTime> sms;
    std::vector<std::pair<uint32_t, uint32_t>> critical_path;  // (sm, index), first to last
    std::vector<OpTotal> ops;                                  // by opcode; count 0 where unused
    uint64_t weight_bytes = 0;                                 // streamed in one step
    double step_boundary_ns = 0.0;  // device model: from one step's last instruction to the next step's start
    double token_ns() const { return makespan_ns + step_boundary_ns; }
    double weight_gbs() const { return token_ns() > 0 ? double(weight_bytes) / token_ns() : 0.0; }
};

// Throws mk::Error naming a stuck instruction if the schedule cannot finish a step (verify first).
Simulation simulate(const Schedule& schedule, const SimOptions& options = {});

// A tensor-parallel step by rank, and how much of the exchange its compute hides (simulate_tp.cpp).
struct RankTotals {
    uint32_t first_sm = 0, n_sms = 0;
    size_t n_instructions = 0;
    uint64_t weight_bytes = 0;
    double busy_ns = 0.0;     // summed over the rank's SMs
    uint32_t n_transfers = 0;  // transfer instructions on the rank's streams
    uint64_t sent_bytes = 0;   // their bytes: what the rank sends to its peers in one step
    // The union over its transfers of [start, end + link_ns - hop_ns): the time the exchange is doing work a
    // single GPU would not (a transfer runs, or its signal is still crossing the link).
    double in_flight_ns = 0.0;
};

struct ExchangeSummary {
    std::vector<RankTotals> ranks;
    double step_ns = 0.0;       // the simulated step
    double free_step_ns = 0.0;  // the same streams with SimOptions::free_exchange
    // What the exchange adds to the step.
    double exposed_ns() const { return step_ns - free_step_ns; }
    double in_flight_ns() const;  // the largest rank's
    // The share of the in-flight time the step does not pay: 1 - exposed / in flight (0 without transfers).
    double hidden() const;
};

// `sim` is simulate(schedule, options); this runs the free-exchange simulation beside it.
ExchangeSummary summarize_exchange(const Schedule& schedule, const Simulation& sim, const SimOptions& options = {});

// A predicted step's time as people read it: "0.745 ms/token" for a decode step, "7.906 ms a 512-token step
// (64760 tokens/s)" for a prefill step of `prefill_tokens`.
std::string step_time_summary(double step_ns, uint32_t prefill_tokens);

// Chrome / Perfetto trace JSON: one thread per SM, one complete event per instruction (named by op,
// its description, seq, waits and the instruction it waited on in args), times in microseconds.
std::string simulation_to_chrome_trace(const Schedule& schedule, const Simulation& sim);
// A Gantt chart: one lane per SM, one rectangle per instruction coloured by op, a legend and a time axis.
std::string simulation_to_svg(const Schedule& schedule, const Simulation& sim);

}  // namespace mk

// The report for a schedule that cannot progress: every blocked stream with the wait it is stuck
// on. Shared by the CPU interpreter's stall detector and the CUDA watchdog so both read the same.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "scheduler/schedule.hpp"

namespace mk {

// One stream stuck on a wait: instruction `instruction` of SM `sm` needs counter >= target.
struct BlockedStream {
    uint32_t sm = 0;
    uint32_t instruction = 0;  // index in the SM's stream
    uint16_t counter = 0;
    uint64_t value = 0;        // the counter when the stall was seen
    uint64_t target = 0;       // absolute: epoch * step_total + the wait's per-step target
};

// "stall in step E: N of M streams blocked, nothing can progress" and one line per blocked stream:
// sm, instruction index, op (with its description), counter index and name, value and target.
// Tolerates out-of-range indices (a corrupt fault record must still be reportable).
std::string format_stall_report(const Schedule& schedule, uint64_t epoch, std::span<const BlockedStream> blocked);

// "sm N #i (describe)": how every runtime message names an instruction.
std::string instruction_label(const Schedule& schedule, uint32_t sm, uint32_t index);

}  // namespace mk

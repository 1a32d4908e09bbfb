// The schedule verifier: proves before anything runs that a schedule has no race (every conflicting
// pair of accesses is ordered by stream order and counters, within a step and across steps), cannot
// deadlock, keeps its counters consistent and in range, and declares the pages its ops need. A
// tensor-parallel schedule is checked whole, so these hold across ranks too (remote writes included).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/schedule.hpp"

namespace mk {

// One wait slot of one instruction (stream = SM index, index in that stream, slot < n_waits).
struct WaitRef {
    uint32_t sm = 0, index = 0, slot = 0;
};

enum class VerifyCheck : uint8_t {
    structure,  // opcodes, counts, counter ids, seq numbering, stream count
    counters,   // per-step totals and overflow bound
    pages,      // n_pages equals the op's page plan and fits the target
    deadlock,   // some wait can never be met (a 1-token generation hangs)
    race,       // two conflicting accesses not ordered by happens-before
    fence,      // a next-step signal could satisfy this step's wait early (a race once streams run ahead)
    ranks,      // tensor parallel: an instruction touches another rank's memory other than by a transfer
    count
};
const char* verify_check_name(VerifyCheck check);

struct VerifyOptions {
    std::vector<WaitRef> ignore_waits;  // treated as absent (tests, the runtime race-detector test)
    bool stop_at_first_error = false;
    size_t max_errors = 64;  // errors past this are counted but not formatted
    // Counter bound: device counters are `counter_bits` wide and a generation runs at most `max_steps`
    // steps; every counter's value (max_steps * step_total) must fit. Defaults: u64 counters, 2^32 steps.
    uint32_t counter_bits = 64;
    uint64_t max_steps = uint64_t(1) << 32;
};

struct VerifyStats {
    size_t n_streams = 0, n_instructions = 0, n_counters = 0, n_waits = 0, n_signals = 0;
    size_t n_accesses = 0;      // regions of one step
    size_t n_conflicts = 0;     // conflicting (pair, step relation) orderings checked
    size_t n_fence_checks = 0;  // (wait, next-step signal) pairs checked
    uint64_t max_step_total = 0;
    uint64_t u32_wrap_steps = 0;  // steps before the fastest counter would wrap a u32 (0: no counter grows)
    double elapsed_ms = 0.0;
};

struct VerifyReport {
    bool ok = true;
    // At most options.max_errors, in check order; n_errors counts every error found, by check.
    std::vector<std::string> errors;
    std::array<size_t, size_t(VerifyCheck::count)> n_errors{};
    VerifyStats stats;

    size_t count(VerifyCheck check) const { return n_errors[size_t(check)]; }
    // "ok: ..." or "N errors (race 2, deadlock 1)" followed by the formatted errors, one a line.
    std::string summary() const;
};

// Never throws for a bad schedule: every problem becomes an error in the report.
VerifyReport verify(const Schedule& schedule, const VerifyOptions& options = {});
// Throws mk::Error "name: schedule failed verification: ..." with the first errors.
void verify_or_throw(const Schedule& schedule, const std::string& name, const VerifyOptions& options = {});

}  // namespace mk

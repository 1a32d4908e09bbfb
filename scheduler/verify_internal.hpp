// Shared by verify.cpp (structure, counters, pages) and verify_order.cpp (deadlock, races):
// the schedule flattened once, with ignored waits removed, and the error sink.
#pragma once
#include <string>
#include <vector>

#include "scheduler/verify.hpp"

namespace mk::verify_detail {

struct Context {
    const Schedule& schedule;
    const VerifyOptions& options;
    VerifyReport& report;
    uint32_t n = 0;                        // instructions per step
    std::vector<uint32_t> offset;          // flat index of each stream's first instruction
    std::vector<uint32_t> stream_of;       // by flat index
    std::vector<const Instruction*> ins;   // by flat index
    std::vector<std::vector<Wait>> waits;  // by flat index, ignored waits removed
    std::vector<uint64_t> step_total;      // by counter
    bool stopped = false;                  // stop_at_first_error hit

    Context(const Schedule& s, const VerifyOptions& o, VerifyReport& r) : schedule(s), options(o), report(r) {}

    uint32_t index_of(uint32_t flat) const { return flat - offset[stream_of[flat]]; }
    uint32_t stream_size(uint32_t sm) const { return uint32_t(schedule.streams[sm].size()); }
    // "sm 3 #12 (matvec_add w=7 rows [0, 16) k=2048)"
    std::string label(uint32_t flat) const;
    // "counter 17 (qkv.L3)"
    std::string counter_label(uint32_t counter) const;
    // Records an error; false once the caller should stop (stop_at_first_error).
    bool add(VerifyCheck check, std::string message);
};

// Runs one step greedily; reports the waits that can never be met. True when a step always completes.
bool check_deadlock(Context& ctx);
// Tensor parallel: every instruction touches only its own rank's memory, a transfer's destination only its peer's.
void check_ranks(Context& ctx);
// Happens-before over two unrolled steps: every conflicting pair of accesses, and the cross-step fence.
void check_order(Context& ctx);

}  // namespace mk::verify_detail

// The measured trace of the resident kernel: per-instruction records (start, waits met, end, loads)
// written as a Chrome/Perfetto trace (one track per SM, like the simulator's predicted trace from
// `mk inspect`), and a summary of per-SM busy / waiting / idle time and of how much of each
// instruction's weight loading overlapped the previous instruction's compute.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/control.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct TraceSummary {
    double span_us = 0;                 // first start to last end over the traced steps
    double busy_pct = 0, wait_pct = 0;  // averaged over SMs: computing (ready..end), waiting (start..ready)
    double idle_pct = 0;                // the rest
    double load_overlap_pct = 0;        // of load time (load_start..load_end), the part before the instruction's start
    uint32_t steps = 0, records = 0;
};

// records: (steps, layout.instructions.size()) as the kernel wrote them; only the first `steps` rows are used.
TraceSummary summarize_trace(const UploadLayout& layout, const std::vector<TraceRecord>& records, uint32_t steps);
std::string format_trace_summary(const TraceSummary& summary);
// Writes the Chrome trace JSON; throws mk::Error when the file cannot be written.
void write_chrome_trace(const std::string& path, const Schedule& schedule, const UploadLayout& layout,
                        const std::vector<TraceRecord>& records, uint32_t steps);

}  // namespace mk

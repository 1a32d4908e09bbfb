// The measured trace (see trace.hpp).
#include "runtime/cuda/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "models/error.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

namespace {
struct Span {
    uint64_t from, to;
    uint64_t length() const { return to > from ? to - from : 0; }
};
}  // namespace

TraceSummary summarize_trace(const UploadLayout& layout, const std::vector<TraceRecord>& records, uint32_t steps) {
    TraceSummary out;
    const size_t n = layout.instructions.size();
    steps = uint32_t(std::min<size_t>(steps, n ? records.size() / n : 0));
    out.steps = steps;
    uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
    for (size_t i = 0; i < steps * n; ++i)
        if (records[i].start && records[i].end) {
            first = std::min(first, records[i].start);
            last = std::max(last, records[i].end);
            ++out.records;
        }
    if (out.records == 0) return out;
    const double span = double(last - first);
    out.span_us = span / 1000.0;
    const uint32_t n_sms = uint32_t(layout.stream_begin.size()) - 1;
    double busy = 0, wait = 0, load = 0, overlapped = 0;
    for (uint32_t step = 0; step < steps; ++step)
        for (uint32_t sm = 0; sm < n_sms; ++sm)
            for (uint32_t i = layout.stream_begin[sm]; i < layout.stream_begin[sm + 1]; ++i) {
                const TraceRecord& r = records[size_t(step) * n + i];
                if (!r.start || !r.end) continue;
                wait += double(Span{r.start, r.ready}.length());
                busy += double(Span{r.ready, r.end}.length());
                if (r.load_start && r.load_end) {
                    load += double(Span{r.load_start, r.load_end}.length());
                    overlapped += double(Span{r.load_start, std::min(r.load_end, r.start)}.length());
                }
            }
    const double total = span * n_sms;
    out.busy_pct = 100.0 * busy / total;
    out.wait_pct = 100.0 * wait / total;
    out.idle_pct = std::max(0.0, 100.0 - out.busy_pct - out.wait_pct);
    out.load_overlap_pct = load > 0 ? 100.0 * overlapped / load : 0.0;
    return out;
}

std::string format_trace_summary(const TraceSummary& s) {
    return fmt::format("trace: {} steps, {} instructions, {:.1f} us; per SM {:.1f}% busy, {:.1f}% waiting, {:.1f}% idle; "
                       "{:.1f}% of weight loading overlapped the previous instruction",
                       s.steps, s.records, s.span_us, s.busy_pct, s.wait_pct, s.idle_pct, s.load_overlap_pct);
}

void write_chrome_trace(const std::string& path, const Schedule& schedule, const UploadLayout& layout,
                        const std::vector<TraceRecord>& records, uint32_t steps) {
    std::ofstream out(path);
    if (!out) fail("{}: cannot write the trace", path);
    const size_t n = layout.instructions.size();
    steps = uint32_t(std::min<size_t>(steps, n ? records.size() / n : 0));
    uint64_t origin = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < steps * n; ++i)
        if (records[i].start) origin = std::min(origin, records[i].start);
    auto us = [&](uint64_t t) { return double(t - origin) / 1000.0; };
    out << "{\"traceEvents\":[\n";
    bool first = true;
    auto event = [&](const std::string& text) {
        out << (first ? "" : ",\n") << text;
        first = false;
    };
    const uint32_t n_sms = uint32_t(layout.stream_begin.size()) - 1;
    for (uint32_t sm = 0; sm < n_sms; ++sm)
        event(fmt::format(R"({{"name":"thread_name","ph":"M","pid":0,"tid":{},"args":{{"name":"SM {}"}}}})", sm, sm));
    for (uint32_t step = 0; step < steps; ++step)
        for (uint32_t sm = 0; sm < n_sms; ++sm)
            for (uint32_t i = layout.stream_begin[sm]; i < layout.stream_begin[sm + 1]; ++i) {
                const TraceRecord& r = records[size_t(step) * n + i];
                if (!r.start || !r.end) continue;
                std::string label = instruction_label(schedule, sm, i - layout.stream_begin[sm]);
                for (char& c : label)
                    if (c == '"' || c == '\\') c = '\'';
                event(fmt::format(R"({{"name":"{}","ph":"X","pid":0,"tid":{},"ts":{:.3f},"dur":{:.3f},)"
                                  R"("args":{{"step":{},"wait_us":{:.3f}}}}})",
                                  label, sm, us(r.start), us(r.end) - us(r.start), step, us(r.ready) - us(r.start)));
                if (r.load_start && r.load_end && r.load_end > r.load_start)
                    event(fmt::format(R"({{"name":"load","ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}}})", sm,
                                      us(r.load_start), us(r.load_end) - us(r.load_start)));
            }
    out << "\n]}\n";
    if (!out) fail("{}: writing the trace failed", path);
}

}  // namespace mk

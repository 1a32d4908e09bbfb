// Formatting of stall reports and instruction labels.
#include "runtime/stall_report.hpp"

#include <fmt/format.h>

#include "instructions/registry.hpp"

namespace mk {

std::string instruction_label(const Schedule& schedule, uint32_t sm, uint32_t index) {
    if (sm >= schedule.streams.size() || index >= schedule.streams[sm].size())
        return fmt::format("sm {} #{} (no such instruction)", sm, index);
    const Instruction& ins = schedule.streams[sm][index];
    if (!is_valid_opcode(ins.opcode)) return fmt::format("sm {} #{} (opcode {})", sm, index, ins.opcode);
    const OpInfo& op = op_info(ins.opcode);
    std::string description = op.describe(ins);
    if (!description.starts_with(op.name)) description = fmt::format("{} {}", op.name, description);
    return fmt::format("sm {} #{} ({})", sm, index, description);
}

std::string format_stall_report(const Schedule& schedule, uint64_t epoch, std::span<const BlockedStream> blocked) {
    std::string out = fmt::format("stall in step {}: {} of {} streams blocked, nothing can progress", epoch,
                                  blocked.size(), schedule.streams.size());
    for (const BlockedStream& b : blocked) {
        std::string counter = fmt::format("counter {}", b.counter);
        uint64_t step_total = 0;
        if (b.counter < schedule.counters.size()) {
            counter += fmt::format(" '{}'", schedule.counters[b.counter].name);
            step_total = schedule.counters[b.counter].step_total;
        }
        const uint64_t base = epoch * step_total;
        out += fmt::format("\n  {}: waits for {} = {} to reach {} (step target {}, step_total {})",
                           instruction_label(schedule, b.sm, b.instruction), counter, b.value, b.target,
                           b.target >= base ? b.target - base : b.target, step_total);
    }
    return out;
}

}  // namespace mk

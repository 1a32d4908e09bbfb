// Hand-built schedule helpers (see tiny_schedule.hpp).
#include "tests/scheduler/tiny_schedule.hpp"

#include "instructions/registry.hpp"

namespace mk::test {

void finish(Schedule& s, bool number_seq) {
    const PlanInputs in = plan_inputs(s.target, s.weights.data());
    for (CounterInfo& c : s.counters) c.step_total = 0;
    uint32_t seq = 0;
    for (auto& stream : s.streams)
        for (Instruction& i : stream) {
            if (number_seq) i.seq = seq++;
            i.n_pages = uint8_t(op_info(i.opcode).page_plan(i, in).n_pages);
            for (uint32_t k = 0; k < i.n_signals; ++k)
                s.counters[i.signals[k].counter].step_total += i.signals[k].delta;
        }
}

}  // namespace mk::test

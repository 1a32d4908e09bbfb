// The step simulator: instruction end events in time order; each signal is logged per counter so a
// wait's met time is that of the signal that took the counter to its target (plus a hop across SMs).
#include "scheduler/simulate.hpp"

#include <algorithm>
#include <functional>
#include <queue>

#include "instructions/registry.hpp"
#include "models/error.hpp"
#include "scheduler/assign.hpp"

namespace mk {

namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr double kNominalContext = 512.0;  // the context attention ops' cost() assumes

// The instruction's cost at the simulated position.
Cost cost_at(const Schedule& s, const Instruction& ins, uint32_t position) {
    const OpInfo& op = op_info(ins.opcode);
    Cost cost = op.cost(ins, s.dims, s.weights.data());
    bool context = false;
    for (const Access& a : op.accesses(ins, s.dims)) context |= a.pos == PosMode::upto_pos;
    if (context) {
        const double scale = (double(position) + 1.0) / kNominalContext;
        cost.activation_bytes = uint64_t(double(cost.activation_bytes) * scale);
        cost.flops = uint64_t(double(cost.flops) * scale);
    }
    return cost;
}

struct SignalLog {
    uint64_t value_after;
    double time_ns;
    uint32_t sm, index;
};

}  // namespace

Simulation simulate(const Schedule& s, const SimOptions& options) {
    const uint32_t n_sms = uint32_t(s.streams.size());
    std::vector<uint32_t> offset(n_sms + 1, 0);
    for (uint32_t sm = 0; sm < n_sms; ++sm) offset[sm + 1] = offset[sm] + uint32_t(s.streams[sm].size());

    Simulation sim;
    sim.timeline.resize(n_sms);
    sim.sms.resize(n_sms);
    sim.ops.resize(size_t(Opcode::count));
    for (uint32_t op = 0; op < uint32_t(Opcode::count); ++op) sim.ops[op].name = op_info(uint16_t(op)).name;
    Target target = s.target;  // what dependency_ns and node_duration_ns price
    if (options.free_exchange) target.link_ns = target.hop_ns;
    std::vector<Cost> cost(offset[n_sms]);
    std::vector<double> duration(offset[n_sms]);
    std::vector<DeviceTime> parts(options.device ? offset[n_sms] : 0);
    for (uint32_t sm = 0; sm < n_sms; ++sm) {
        sim.timeline[sm].resize(s.streams[sm].size());
        for (uint32_t i = 0; i < s.streams[sm].size(); ++i) {
            const Instruction& ins = s.streams[sm][i];
            for (uint32_t w = 0; w < ins.n_waits; ++w)
                if (ins.waits[w].counter >= s.counters.size())
                    fail("simulate: sm {} #{} waits on counter {} of {}", sm, i, ins.waits[w].counter,
                         s.counters.size());
            for (uint32_t k = 0; k < ins.n_signals; ++k)
                if (ins.signals[k].counter >= s.counters.size())
                    fail("simulate: sm {} #{} signals counter {} of {}", sm, i, ins.signals[k].counter,
                         s.counters.size());
            cost[offset[sm] + i] = cost_at(s, ins, options.position);
            const bool free = options.free_exchange && op_info(ins.opcode).effects(ins).writes_peer();
            if (options.device) parts[offset[sm] + i] = device_instruction_time(s, ins, options.position, *options.device);
            duration[offset[sm] + i] = free                ? 0.0
                                       : options.device ? parts[offset[sm] + i].total_ns()
                                                        : node_duration_ns(cost[offset[sm] + i], target);
        }
    }

    std::vector<std::vector<SignalLog>> log(s.counters.size());
    std::vector<uint64_t> value(s.counters.size(), 0);
    using Parked = std::pair<uint64_t, uint32_t>;  // (target, sm)
    std::vector<std::priority_queue<Parked, std::vector<Parked>, std::greater<Parked>>> parked(s.counters.size());
    using End = std::pair<double, uint32_t>;  // (end time, sm)
    std::priority_queue<End, std::vector<End>, std::greater<End>> ends;
    std::vector<uint32_t> pc(n_sms, 0);
    std::vector<double> free_ns(n_sms, 0.0);

    // Starts sm's next instruction if its waits are met (else parks it on the first unmet counter).
    auto try_start = [&](uint32_t sm) {
        if (pc[sm] >= s.streams[sm].size()) return;
        const Instruction& ins = s.streams[sm][pc[sm]];
        SimEvent& ev = sim.timeline[sm][pc[sm]];
        ev = {};
        for (uint32_t w = 0; w < ins.n_waits; ++w) {
            const Wait& wait = ins.waits[w];
            if (wait.target == 0) continue;
            if (value[wait.counter] < wait.target) {
                parked[wait.counter].push({wait.target, sm});
                return;
            }
            const auto& entries = log[wait.counter];
            const auto hit = std::lower_bound(entries.begin(), entries.end(), uint64_t(wait.target),
                                              [](const SignalLog& e, uint64_t t) { return e.value_after < t; });
            const double met = hit->time_ns + dependency_ns(target, hit->sm, sm);
            if (met > ev.ready_ns) {
                ev.ready_ns = met;
                ev.waited_sm = hit->sm;
                ev.waited_index = hit->index;
            }
        }
        if (ev.ready_ns <= free_ns[sm]) ev.waited_sm = kNone;
        else if (options.device)  // the waiter's back-off: its poll lands after the counter is met
            ev.ready_ns += device_poll_overshoot_ns(ev.ready_ns - free_ns[sm], *options.device);
        ev.start_ns = std::max(free_ns[sm], ev.ready_ns);
        ev.end_ns = ev.start_ns + duration[offset[sm] + pc[sm]];
        ends.push({ev.end_ns, sm});
    };

    for (uint32_t sm = 0; sm < n_sms; ++sm) try_start(sm);
    while (!ends.empty()) {
        const auto [end, sm] = ends.top();
        ends.pop();
        const Instruction& ins = s.streams[sm][pc[sm]];
        for (uint32_t k = 0; k < ins.n_signals; ++k) {
            const uint32_t c = ins.signals[k].counter;
            value[c] += ins.signals[k].delta;
            log[c].push_back({value[c], end, sm, pc[sm]});
            while (!parked[c].empty() && parked[c].top().first <= value[c]) {
                const uint32_t woken = parked[c].top().second;
                parked[c].pop();
                try_start(woken);
            }
        }
        free_ns[sm] = end;
        ++pc[sm];
        try_start(sm);
    }
    for (uint32_t sm = 0; sm < n_sms; ++sm)
        if (pc[sm] < s.streams[sm].size())
            fail("simulate: sm {} #{} ({}) never starts: the step deadlocks (run verify for the cycle)", sm, pc[sm],
                 op_info(s.streams[sm][pc[sm]].opcode).describe(s.streams[sm][pc[sm]]));

    // Totals, per-SM time split and the critical path back from the last instruction to finish.
    uint32_t last_sm = kNone, last_index = 0;
    for (uint32_t sm = 0; sm < n_sms; ++sm)
        for (uint32_t i = 0; i < s.streams[sm].size(); ++i) {
            const SimEvent& ev = sim.timeline[sm][i];
            if (last_sm == kNone || ev.end_ns > sim.makespan_ns)
                sim.makespan_ns = ev.end_ns, last_sm = sm, last_index = i;
            const Cost& c = cost[offset[sm] + i];
            OpTotal& op = sim.ops[s.streams[sm][i].opcode];
            op.count++;
            op.busy_ns += ev.end_ns - ev.start_ns;
            op.weight_bytes += c.weight_bytes;
            op.flops += c.flops;
            if (options.device) {
                const DeviceTime& p = parts[offset[sm] + i];
                op.overhead_ns += p.overhead_ns;
                op.consume_ns += p.consume_ns;
                op.load_ns += p.load_ns;
            }
            sim.weight_bytes += c.weight_bytes;
            sim.sms[sm].busy_ns += ev.end_ns - ev.start_ns;
        }
    for (uint32_t sm = 0; sm < n_sms; ++sm) {
        const double done = s.streams[sm].empty() ? 0.0 : sim.timeline[sm].back().end_ns;
        sim.sms[sm].idle_ns = sim.makespan_ns - done;
        sim.sms[sm].wait_ns = std::max(0.0, done - sim.sms[sm].busy_ns);
    }
    for (uint32_t sm = last_sm, i = last_index; sm != kNone;) {
        sim.critical_path.push_back({sm, i});
        const SimEvent& ev = sim.timeline[sm][i];
        if (ev.waited_sm != kNone) {
            sm = ev.waited_sm;
            i = ev.waited_index;
        } else if (i > 0 && ev.start_ns > 0.0) {
            --i;
        } else {
            sm = kNone;
        }
    }
    std::reverse(sim.critical_path.begin(), sim.critical_path.end());
    if (options.device) sim.step_boundary_ns = device_step_boundary_ns(s.target, *options.device);
    return sim;
}

}  // namespace mk

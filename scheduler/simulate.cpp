// The step simulator: instruction end events in time order; each signal is logged per counter so a
// wait's met time is that of the signal that took the counter to its target (plus a hop across SMs).
#include "scheduler/simulate.hpp"

#include <algorithm>
#include <cmath>
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
        // A prefill chunk's queries (T of them, the last at `position`) see from position + 2 - T to position + 1
        // positions: (position + 1 - (T - 1) / 2) on average.
        const double T = s.prefill_tokens;
        const double visible = T > 1 ? std::max(double(position) + 1.0 - (T - 1.0) / 2.0, (T + 1.0) / 2.0) : position + 1.0;
        const double scale = visible / kNominalContext;
        cost.activation_bytes = uint64_t(double(cost.activation_bytes) * scale);
        cost.flops = uint64_t(double(cost.flops) * scale);
    }
    return cost;
}

// An SM's loader under the device cost model: it issues the stream's tiles in order at the SM's share of
// the bandwidth as soon as a page is free (and the instruction queue has room), never waiting on counters,
// so weights stream in while the consumers wait or run attention. A tile's page is free again once the
// consumers are done with it.
struct SmLoader {
    double free_ns = 0;              // the SM's share of bandwidth is free from here
    std::vector<double> page_free;   // per page: when the consumers released its last tile
    std::vector<double> ends;        // when each instruction of the stream ended (the queue's bound)

    SmLoader(uint32_t n_pages, bool filled_before_step)
        : free_ns(filled_before_step ? -INFINITY : 0.0), page_free(n_pages, filled_before_step ? -INFINITY : 0.0) {}

    // The consumers start at `start`; returns when the instruction ends. Its tiles go to the `pages`
    // earliest-freed pages (the ring hands an instruction the pages freed first), tile t to t % pages.
    double run(const DeviceTime& p, const DeviceModel& m, double fill_bytes_per_ns, double start) {
        double consumer = start + p.overhead_ns + p.prologue_ns;
        if (p.tile_bytes.empty() || p.pages == 0) {
            consumer += p.consume_ns - p.prologue_ns;
        } else {
            std::vector<uint32_t> order(page_free.size());
            for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
            const uint32_t pages = std::min<uint32_t>(p.pages, uint32_t(order.size()));
            std::partial_sort(order.begin(), order.begin() + pages, order.end(),
                              [&](uint32_t a, uint32_t b) { return page_free[a] < page_free[b]; });
            const size_t i = ends.size();
            const uint32_t depth = m.code.queue_depth;
            const double queue_ns = depth && i >= depth ? ends[i - depth] : -INFINITY;
            uint64_t total = 0;
            for (uint64_t b : p.tile_bytes) total += b;
            const double consume_per_byte = total ? (p.consume_ns - p.prologue_ns) / double(total) : 0.0;
            const bool from_l2 = p.fill_bytes_per_ns > 0;  // a prefill token block's rows another block just read
            const double rate = from_l2 ? p.fill_bytes_per_ns : fill_bytes_per_ns;
            for (size_t t = 0; t < p.tile_bytes.size(); ++t) {
                const uint32_t page = order[t % pages];
                const double issue = std::max({free_ns, page_free[page], queue_ns});
                free_ns = issue + double(p.tile_bytes[t]) / rate;
                const double landed = free_ns + (from_l2 ? m.l2_load_ns : m.dram_load_ns);
                consumer = std::max(consumer, landed) + double(p.tile_bytes[t]) * consume_per_byte;
                page_free[page] = consumer;
            }
        }
        ends.push_back(consumer);
        return consumer;
    }
};

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
    std::vector<bool> free_exchange(offset[n_sms], false);
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
            free_exchange[offset[sm] + i] = free;
            // The device model's instructions run through their SM's loader (SmLoader::run), the ideal model's
            // for a fixed duration.
            if (options.device) parts[offset[sm] + i] = device_instruction_time(s, ins, options.position, *options.device);
            else duration[offset[sm] + i] = free ? 0.0 : node_duration_ns(cost[offset[sm] + i], target);
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
    std::vector<SmLoader> loaders;
    if (options.device)
        loaders.assign(n_sms, SmLoader(s.target.n_pages, options.device->code.stream_across_steps));
    const double fill_bytes_per_ns = s.target.bandwidth_gbs / s.target.n_sms;

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
        const uint32_t k = offset[sm] + pc[sm];
        if (!options.device) ev.end_ns = ev.start_ns + duration[k];
        else if (free_exchange[k]) loaders[sm].ends.push_back(ev.end_ns = ev.start_ns);
        else ev.end_ns = loaders[sm].run(parts[k], *options.device, fill_bytes_per_ns, ev.start_ns);
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
            op.activation_bytes += c.activation_bytes;
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

// The vector-clock race detector. Clocks: SM s's own entry starts at 1 and grows after each of its
// signals, so a stamp (s, c) happened-before SM t exactly when c <= clock_t[s].
#include "runtime/cpu/race_detector.hpp"

#include <algorithm>

#include "models/error.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

RaceDetector::RaceDetector(const Schedule& schedule, const PreparedSchedule& prepared)
    : schedule_(schedule),
      prepared_(prepared),
      n_sms_(uint32_t(schedule.streams.size())),
      clocks_(size_t(n_sms_) * n_sms_, 0),
      history_(schedule.counters.size()),
      base_(schedule.counters.size(), 0),
      arena_((schedule.arena_bytes + 3) / 4) {
    for (uint32_t s = 0; s < n_sms_; ++s) clocks_[size_t(s) * n_sms_ + s] = 1;
    const size_t n_slots = size_t(schedule.dims.n_layers) * schedule.dims.kv_dim();  // one slot per (layer, kv row)
    kv_[0].resize(n_slots);
    kv_[1].resize(n_slots);
}

void RaceDetector::begin_step(uint64_t epoch, int32_t pos) {
    std::lock_guard lock(mu_);
    ++gen_;
    pos_ = pos;
    epoch_ = epoch;
    for (uint32_t c = 0; c < history_.size(); ++c) {
        history_[c].values.clear();
        history_[c].clocks.clear();
        base_[c] = epoch * schedule_.counters[c].step_total;
    }
}

void RaceDetector::before_instruction(uint32_t sm, uint32_t index, const PreparedInstruction& p) {
    std::lock_guard lock(mu_);
    uint32_t* clock = &clocks_[size_t(sm) * n_sms_];
    const Instruction& ins = *p.ins;
    // A wait synchronizes with the signals that brought the counter to its target, no later ones:
    // that much is all the schedule guarantees, whatever else had arrived when the wait was checked.
    for (uint32_t w = 0; w < ins.n_waits; ++w) {
        const uint16_t c = ins.waits[w].counter;
        const uint64_t target = epoch_ * schedule_.counters[c].step_total + ins.waits[w].target;
        if (target <= base_[c]) continue;
        const History& h = history_[c];
        const auto it = std::lower_bound(h.values.begin(), h.values.end(), target);
        if (it == h.values.end()) fail("race detector: a met wait on counter {} has no signal reaching {}", c, target);
        const uint32_t* joined = &h.clocks[size_t(it - h.values.begin()) * n_sms_];
        for (uint32_t s = 0; s < n_sms_; ++s) clock[s] = std::max(clock[s], joined[s]);
    }

    const Stamp me{sm, index, clock[sm]};
    for (int pass = 0; pass < 2; ++pass) {  // reads first: an op may read and write the same words
        for (const Access& a : prepared_.accesses[p.flat]) {
            if (a.write != (pass == 1)) continue;
            if (a.space == Space::arena) {
                for (uint64_t word = a.begin / 4; word < (a.end + 3) / 4; ++word)
                    check(arena_[word], me, clock, a.write, a, word);
                continue;
            }
            // KV writes are at the step's position only (prepare_schedule checks it) and steps are
            // barriers, so within a step only that position's row can race: it is all we track.
            std::vector<Cell>& cells = kv_[a.space == Space::k_cache ? 0 : 1];
            for (uint64_t slot = a.begin; slot < a.end; ++slot) check(cells[slot], me, clock, a.write, a, slot);
        }
    }
}

void RaceDetector::check(Cell& cell, const Stamp& me, const uint32_t* clock, bool write, const Access& a,
                         uint64_t unit) {
    if (cell.gen != gen_) {
        cell.gen = gen_;
        cell.write = {};
        cell.reads.clear();
    }
    if (cell.write.sm != kNone && cell.write.clock > clock[cell.write.sm]) report(cell.write, write, true, a, unit);
    if (write) {
        for (const Stamp& r : cell.reads)
            if (r.clock > clock[r.sm]) report(r, write, false, a, unit);
        cell.write = me;
        cell.reads.clear();
        return;
    }
    for (Stamp& r : cell.reads) {
        if (r.sm == me.sm) {
            r = me;
            return;
        }
    }
    cell.reads.push_back(me);
}

void RaceDetector::report(const Stamp& other, bool write, bool other_wrote, const Access& a, uint64_t unit) const {
    std::string where;
    if (a.space == Space::arena) {
        where = fmt::format("arena bytes [{}, {})", unit * 4, unit * 4 + 4);
        for (const BufferInfo& b : schedule_.buffers)
            if (unit * 4 >= b.offset && unit * 4 < b.offset + b.bytes) where += fmt::format(" (buffer '{}')", b.name);
    } else {
        const ModelDims& d = schedule_.dims;
        where = fmt::format("{} cache layer {} kv head {} dim {} at position {}", a.space == Space::k_cache ? "K" : "V",
                            unit / d.kv_dim(), unit % d.kv_dim() / d.head_dim, unit % d.head_dim, pos_);
    }
    fail("data race: {} {} which {} {}, and no wait orders the two", write ? "writes" : "reads", where,
         instruction_label(schedule_, other.sm, other.index), other_wrote ? "writes" : "reads");
}

uint64_t RaceDetector::signal(uint32_t sm, uint16_t counter, uint16_t delta, std::atomic<uint64_t>& value) {
    std::lock_guard lock(mu_);
    // Under the lock, so the history is in the counter's modification order and complete before
    // any waiter can see the new value.
    const uint64_t reached = value.fetch_add(delta, std::memory_order_seq_cst) + delta;
    History& h = history_[counter];
    const size_t n = h.values.size();
    h.values.push_back(reached);
    h.clocks.resize((n + 1) * n_sms_, 0);
    uint32_t* joined = &h.clocks[n * n_sms_];
    uint32_t* clock = &clocks_[size_t(sm) * n_sms_];
    const uint32_t* previous = n ? joined - n_sms_ : nullptr;
    for (uint32_t s = 0; s < n_sms_; ++s) joined[s] = std::max(previous ? previous[s] : 0u, clock[s]);
    ++clock[sm];  // later accesses of this SM are not covered by what it just published
    return reached;
}

}  // namespace mk

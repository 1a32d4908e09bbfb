// The interpreter: a run queue of virtual SMs under one mutex, counters as atomics. A worker runs
// an SM's instructions while their waits are met (acquire loads) and parks it on the first unmet
// one; a signal (release increment) moves the SMs parked on that counter back to the run queue.
#include "runtime/cpu/interpreter.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "models/error.hpp"
#include "runtime/prepare.hpp"
#include "runtime/cpu/race_detector.hpp"
#include "runtime/cpu/tile_readers.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

namespace {

struct alignas(64) CounterSlot {
    std::atomic<uint64_t> value{0};
    std::atomic<uint32_t> n_parked{0};  // SMs parked on this counter; changed under the run lock
};

struct Parked {
    uint32_t sm;
    uint64_t target;  // absolute
};

// What one worker thread runs ops with; the SM it runs changes, these do not.
struct Worker {
    explicit Worker(uint32_t max_pages) : checked(max_pages) {}
    OpContext ctx;
    DirectTileReader direct;
    CheckedTileReader checked;
};

enum class Outcome { finished, blocked, stopped };

}  // namespace

struct Interpreter::Impl {
    Impl(Schedule schedule_, const ProgramMemory& memory_, InterpreterOptions options_);
    ~Impl();
    std::unique_ptr<Worker> make_worker() const;
    void helper_main();
    void work(Worker& w, std::unique_lock<std::mutex>& lock);
    Outcome run_sm(Worker& w, uint32_t sm, uint16_t& counter, uint64_t& target);
    bool execute(Worker& w, uint32_t sm, uint32_t index, const PreparedInstruction& p);
    void signal(uint32_t sm, const Signal& s);
    bool park_locked(uint32_t sm, uint16_t counter, uint64_t target);
    void end_step_locked();
    void push_locked(uint32_t sm) {
        ring[(ring_head + ring_size) % ring.size()] = sm;
        ++ring_size;
    }

    const Schedule schedule;
    const ProgramMemory memory;
    const InterpreterOptions options;
    const PreparedSchedule prepared;  // points into `schedule`
    std::unique_ptr<CounterSlot[]> counters;
    std::vector<uint64_t> step_total;          // by counter
    std::vector<uint8_t*> rank_arena;          // by rank (ProgramMemory::rank_arenas, or `arena` for each)
    std::vector<uint32_t> pc;                  // by SM: owned by whoever holds the SM
    std::vector<SmPages> pages;                // by SM, checked mode only
    std::unique_ptr<RaceDetector> races;       // detect mode only
    std::atomic<bool> stop{false};             // a failure: workers drop their SMs
    uint64_t epoch = 0;
    StepState* step = nullptr;
    bool failed = false;  // the last step failed: its counters are mid-step until reset()

    // The run state, under `mu`.
    std::mutex mu;
    std::condition_variable cv;  // runnable SMs, the start or end of a step, shutdown
    std::vector<uint32_t> ring;  // FIFO of runnable SMs; each SM is in it at most once
    size_t ring_head = 0, ring_size = 0;
    std::vector<std::vector<Parked>> parked;  // by counter
    uint32_t n_active = 0;                    // workers running an SM outside the lock
    uint32_t n_finished = 0;
    bool step_done = true;
    bool shutdown = false;
    std::string failure;  // the step's first error, or its stall report
    std::unique_ptr<Worker> caller;
    std::vector<std::thread> helpers;
};

Interpreter::Impl::Impl(Schedule schedule_, const ProgramMemory& memory_, InterpreterOptions options_)
    : schedule(std::move(schedule_)),
      memory(memory_),
      options(options_),
      prepared(prepare_schedule(schedule, memory, options.check_pages, options.detect_races)),
      counters(new CounterSlot[schedule.counters.size()]),
      pc(schedule.streams.size(), 0),
      ring(std::max<size_t>(schedule.streams.size(), 1)),
      parked(schedule.counters.size()) {
    for (const CounterInfo& c : schedule.counters) step_total.push_back(c.step_total);
    for (uint32_t r = 0; r < schedule.tp_size; ++r)
        rank_arena.push_back(memory.rank_arenas ? memory.rank_arenas[r] : memory.arena);
    if (options.check_pages)
        for (size_t s = 0; s < schedule.streams.size(); ++s)
            pages.emplace_back(schedule.target.n_pages, schedule.target.page_bytes);
    if (options.detect_races) races = std::make_unique<RaceDetector>(schedule, prepared);
    caller = make_worker();
}

Interpreter::Impl::~Impl() {
    {
        std::lock_guard lock(mu);
        shutdown = true;
    }
    cv.notify_all();
    for (std::thread& t : helpers) t.join();
}

std::unique_ptr<Worker> Interpreter::Impl::make_worker() const {
    auto w = std::make_unique<Worker>(schedule.target.n_pages);
    OpContext& ctx = w->ctx;
    ctx.dims = &schedule.dims;
    ctx.rope_inv_freq = memory.rope_inv_freq;
    ctx.arena = memory.arena;
    ctx.rank_arenas = rank_arena.data();
    ctx.weights = memory.weights;
    ctx.k_cache = memory.k_cache;
    ctx.v_cache = memory.v_cache;
    ctx.ctx_len = memory.ctx_len;
    ctx.tiles = options.check_pages ? static_cast<TileReader*>(&w->checked) : &w->direct;
    ctx.dots = options.dots;
    return w;
}

void Interpreter::Impl::helper_main() {
    std::unique_ptr<Worker> w = make_worker();
    std::unique_lock lock(mu);
    for (;;) {
        cv.wait(lock, [&] { return shutdown || !step_done; });
        if (shutdown) return;
        work(*w, lock);
    }
}

// Runs SMs from the queue until the step is over; called and returns with the lock held.
void Interpreter::Impl::work(Worker& w, std::unique_lock<std::mutex>& lock) {
    while (!step_done) {
        if (ring_size > 0 && !stop.load(std::memory_order_relaxed)) {
            // Set per SM taken: a thread asleep in cv.wait may wake up in a later step than it slept in.
            w.ctx.step = step;
            const uint32_t sm = ring[ring_head];
            w.ctx.arena = rank_arena[schedule.rank_of_stream(sm)];
            ring_head = (ring_head + 1) % ring.size();
            --ring_size;
            ++n_active;
            for (;;) {
                lock.unlock();
                uint16_t counter = 0;
                uint64_t target = 0;
                const Outcome out = run_sm(w, sm, counter, target);
                lock.lock();
                if (out == Outcome::blocked && !park_locked(sm, counter, target)) continue;  // signalled meanwhile
                if (out == Outcome::finished) ++n_finished;
                break;
            }
            --n_active;
        }
        const bool runnable = ring_size > 0 && !stop.load(std::memory_order_relaxed);
        // Only a running instruction can signal: with none running and none runnable, the step is over.
        if (!runnable && n_active == 0) end_step_locked();
        else if (!runnable) cv.wait(lock);
    }
}

Outcome Interpreter::Impl::run_sm(Worker& w, uint32_t sm, uint16_t& counter, uint64_t& target) {
    const std::vector<PreparedInstruction>& stream = prepared.streams[sm];
    uint32_t i = pc[sm];
    for (; i < stream.size(); ++i) {
        const PreparedInstruction& p = stream[i];
        const Instruction& ins = *p.ins;
        for (uint32_t k = 0; k < ins.n_waits; ++k) {
            const Wait& wait = ins.waits[k];
            const uint64_t needed = epoch * step_total[wait.counter] + wait.target;
            if (counters[wait.counter].value.load(std::memory_order_acquire) < needed) {
                pc[sm] = i;
                counter = wait.counter;
                target = needed;
                return Outcome::blocked;
            }
        }
        if (stop.load(std::memory_order_relaxed) || !execute(w, sm, i, p)) {
            pc[sm] = i;
            return Outcome::stopped;
        }
        for (uint32_t k = 0; k < ins.n_signals; ++k) signal(sm, ins.signals[k]);
    }
    pc[sm] = i;
    return Outcome::finished;
}

bool Interpreter::Impl::execute(Worker& w, uint32_t sm, uint32_t index, const PreparedInstruction& p) {
    try {
        if (races) races->before_instruction(sm, index, p);
        w.ctx.plan = p.plan;
        if (options.check_pages) w.checked.begin(pages[sm], *p.plan, memory.weights);
        else w.direct.begin(*p.plan, memory.weights);
        p.op->run_cpu(*p.ins, w.ctx);
        if (options.check_pages) w.checked.end();
        return true;
    } catch (const std::exception& e) {
        std::string message = instruction_label(schedule, sm, index) + ": " + e.what();
        std::lock_guard lock(mu);
        if (failure.empty()) failure = std::move(message);
        stop.store(true, std::memory_order_relaxed);
    } catch (...) {
        std::lock_guard lock(mu);
        if (failure.empty()) failure = instruction_label(schedule, sm, index) + ": unknown exception";
        stop.store(true, std::memory_order_relaxed);
    }
    return false;
}

void Interpreter::Impl::signal(uint32_t sm, const Signal& s) {
    CounterSlot& slot = counters[s.counter];
    // seq_cst on both sides (here: add, then load n_parked; in park_locked: add n_parked, then load
    // the value) so that a parking SM and a signal cannot both miss each other.
    if (races) races->signal(sm, s.counter, s.delta, slot.value);
    else slot.value.fetch_add(s.delta, std::memory_order_seq_cst);
    if (slot.n_parked.load(std::memory_order_seq_cst) == 0) return;

    uint32_t woken = 0;
    {
        std::lock_guard lock(mu);
        const uint64_t now = slot.value.load(std::memory_order_seq_cst);
        std::vector<Parked>& list = parked[s.counter];
        size_t kept = 0;
        for (const Parked& p : list) {
            if (p.target <= now) {
                push_locked(p.sm);
                ++woken;
            } else {
                list[kept++] = p;
            }
        }
        list.resize(kept);
        slot.n_parked.fetch_sub(woken, std::memory_order_seq_cst);
    }
    if (woken == 1) cv.notify_one();
    else if (woken > 1) cv.notify_all();
}

bool Interpreter::Impl::park_locked(uint32_t sm, uint16_t counter, uint64_t target) {
    CounterSlot& slot = counters[counter];
    slot.n_parked.fetch_add(1, std::memory_order_seq_cst);
    if (slot.value.load(std::memory_order_seq_cst) >= target) {  // the re-check under the lock
        slot.n_parked.fetch_sub(1, std::memory_order_seq_cst);
        return false;
    }
    parked[counter].push_back({sm, target});
    return true;
}

void Interpreter::Impl::end_step_locked() {
    step_done = true;
    if (!stop.load(std::memory_order_relaxed) && n_finished < schedule.streams.size()) {
        std::vector<BlockedStream> blocked;
        for (uint32_t c = 0; c < parked.size(); ++c)
            for (const Parked& p : parked[c])
                blocked.push_back({p.sm, pc[p.sm], uint16_t(c), counters[c].value.load(std::memory_order_relaxed), p.target});
        std::sort(blocked.begin(), blocked.end(), [](const auto& a, const auto& b) { return a.sm < b.sm; });
        failure = format_stall_report(schedule, epoch, blocked);
    }
    cv.notify_all();
}

Interpreter::Interpreter(Schedule schedule, const ProgramMemory& memory, InterpreterOptions options) {
    if (options.n_threads == 0) options.n_threads = std::max(1u, std::thread::hardware_concurrency());
    impl_ = std::make_unique<Impl>(std::move(schedule), memory, options);
    try {
        Impl* m = impl_.get();
        for (uint32_t t = 1; t < options.n_threads; ++t) m->helpers.emplace_back([m] { m->helper_main(); });
    } catch (const std::system_error& e) {
        fail("interpreter: cannot start {} worker threads: {}", options.n_threads, e.what());
    }
}

Interpreter::~Interpreter() = default;

void Interpreter::run_step(StepState& step) {
    Impl& m = *impl_;
    if (m.failed) fail("interpreter: the previous step failed; reset() before running another");
    const uint64_t epoch = step.epoch;
    for (uint32_t c = 0; c < m.step_total.size(); ++c) {
        const uint64_t value = m.counters[c].value.load(std::memory_order_relaxed);
        if (value != epoch * m.step_total[c])
            fail("interpreter: counter {} '{}' is at {}, but step {} starts it at {} (is the epoch right?)",
                 c, m.schedule.counters[c].name, value, epoch, epoch * m.step_total[c]);
    }
    if ((m.memory.k_cache || m.memory.v_cache) && (step.pos < 0 || uint32_t(step.pos) >= m.memory.ctx_len))
        fail("interpreter: position {} is outside the KV cache's {} positions", step.pos, m.memory.ctx_len);
    if (m.races) m.races->begin_step(epoch, step.pos);

    std::unique_lock lock(m.mu);
    m.epoch = epoch;
    m.step = &step;
    m.stop.store(false, std::memory_order_relaxed);
    m.failure.clear();
    m.n_active = 0;
    m.n_finished = 0;
    for (uint32_t c = 0; c < m.parked.size(); ++c) {
        m.parked[c].clear();
        m.counters[c].n_parked.store(0, std::memory_order_relaxed);
    }
    m.ring_head = 0;
    m.ring_size = 0;
    for (uint32_t sm = 0; sm < m.schedule.streams.size(); ++sm) {
        m.pc[sm] = 0;
        m.push_locked(sm);
    }
    m.step_done = false;
    m.cv.notify_all();
    m.work(*m.caller, lock);
    m.failed = !m.failure.empty();
    if (m.failed) throw Error(m.failure);
}

void Interpreter::reset(uint32_t epoch) {
    impl_->failed = false;
    for (uint32_t c = 0; c < impl_->step_total.size(); ++c)
        impl_->counters[c].value.store(uint64_t(epoch) * impl_->step_total[c], std::memory_order_relaxed);
}

uint64_t Interpreter::counter_value(uint32_t counter) const {
    if (counter >= impl_->step_total.size()) fail("interpreter: no counter {}", counter);
    return impl_->counters[counter].value.load(std::memory_order_relaxed);
}

const Schedule& Interpreter::schedule() const { return impl_->schedule; }

const PagePlan& Interpreter::page_plan(uint32_t sm, uint32_t index) const {
    if (sm >= impl_->prepared.streams.size() || index >= impl_->prepared.streams[sm].size())
        fail("interpreter: sm {} has no instruction #{}", sm, index);
    return *impl_->prepared.streams[sm][index].plan;
}

uint32_t Interpreter::n_threads() const { return uint32_t(impl_->helpers.size()) + 1; }

}  // namespace mk

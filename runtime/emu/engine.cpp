// The emulator's scheduler: residency of grids on a device's SMs, one fiber per device thread, one
// seeded choice per switch, virtual time, bulk copies landing at random later points, and the report
// of a device that can no longer progress.
#include "runtime/emu/engine.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mk_emu {

namespace {
constexpr uint64_t kNsPerDecision = 2;
constexpr uint64_t kMaxDilationNs = 1'000'000;
constexpr uint32_t kSliceDecisions = 20000;

// Thrown by a faulting thread so its frames unwind (no leak); the grid is torn down after it.
struct KernelFault {};

void thread_entry(void* arg) {
    Thread* t = static_cast<Thread*>(arg);
    try {
        t->block->grid->spec.body();
    } catch (const KernelFault&) {
    }
}
}  // namespace

std::string where_text(Where w) {
    if (!w.file_name() || !*w.file_name()) return "?";
    std::string f = w.file_name();
    const size_t slash = f.rfind('/');
    if (slash != std::string::npos) {
        const size_t prev = f.rfind('/', slash - 1);
        f = f.substr(prev == std::string::npos ? 0 : prev + 1);
    }
    return f + ":" + std::to_string(w.line());
}

dim3 Block::idx() const {
    const dim3 g = grid->spec.grid;
    return dim3(index % g.x, index / g.x % g.y, index / (g.x * g.y));
}

Device::Device(int ord) : ordinal(ord) {
    const Config& c = engine().config;
    streams.push_back(std::make_unique<Stream>());
    streams[0]->device = this;
    sm_threads.assign(c.n_sms, 0);
    sm_blocks.assign(c.n_sms, 0);
    sm_smem.assign(c.n_sms, 0);
    rng = c.seed * 0x9e3779b97f4a7c15ull + uint64_t(ord) + 1;
}

uint64_t Device::random() {  // splitmix64
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Engine& Engine::get() {
    static Engine* e = [] {
        auto* engine = new Engine();  // never destroyed: fibers may outlive static destruction order
        if (const char* seed = std::getenv("MK_EMU_SEED")) engine->config.seed = std::strtoull(seed, nullptr, 10);
        if (const char* sms = std::getenv("MK_EMU_SMS")) engine->config.n_sms = uint32_t(std::strtoul(sms, nullptr, 10));
        return engine;
    }();
    return *e;
}

void Engine::reset(const Config& c) {
    devices.clear();
    config = c;
    for (uint32_t i = 0; i < c.n_devices; ++i) devices.push_back(std::make_unique<Device>(int(i)));
    report.clear();
}

const Allocation* Engine::find(const void* p, uintptr_t* base) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (a >= it->first + it->second.bytes) return nullptr;
    if (base) *base = it->first;
    return &it->second;
}

std::string Engine::describe(const void* p, const Block* block) const {
    uintptr_t base = 0;
    char buf[160];
    if (const Allocation* a = find(p, &base)) {
        std::snprintf(buf, sizeof buf, "%s allocation #%u + %zu", a->kind == AllocKind::device ? "device" : "host-mapped",
                      a->id, size_t(reinterpret_cast<uintptr_t>(p) - base));
        return buf;
    }
    if (!block && current) block = current->block;
    if (block && block->smem) {
        const Block& b = *block;
        const auto* q = static_cast<const uint8_t*>(p);
        if (q >= b.smem && q < b.smem + b.smem_bytes) {
            std::snprintf(buf, sizeof buf, "shared memory + %zu", size_t(q - b.smem));
            return buf;
        }
    }
    std::snprintf(buf, sizeof buf, "%p (no allocation)", p);
    return buf;
}

// ---- fiber side ----

void Engine::fault(const std::string& what) {
    Thread& t = *current;
    Grid& g = *t.block->grid;
    if (g.failure.empty()) {
        const dim3 b = t.block->idx();
        g.failure = "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) +
                    ") thread " + std::to_string(t.tid) + " (warp " + std::to_string(t.warp()) + " lane " +
                    std::to_string(t.lane()) + "): " + what;
    }
    t.waits_for = "fault";
    throw KernelFault{};
}

void Engine::block_current(const char* waits_for, Where where, uint32_t id) {
    Thread& t = *current;
    t.state = ThreadState::blocked;
    t.waits_for = waits_for;
    t.where = where;
    t.wait_id = id;
    t.fiber->suspend();
}

void Engine::sleep_current(uint64_t ns, const char* waits_for, Where where) {
    Thread& t = *current;
    Device& d = *t.block->grid->stream->device;
    t.state = ThreadState::sleeping;
    t.wake_ns = d.now_ns + std::max<uint64_t>(ns, 1);
    t.waits_for = waits_for;
    t.where = where;
    t.fiber->suspend();
}

void Engine::maybe_preempt() {
    Thread& t = *current;
    Device& d = *t.block->grid->stream->device;
    if (d.random_below(256) < config.preempt_per_256) {
        t.state = ThreadState::ready;
        t.fiber->suspend();
    }
}

void Engine::wake(Thread* t) {
    t->state = ThreadState::ready;
    t->block->grid->stream->device->ready.push_back(t);
}

// ---- scheduler side ----

bool Engine::place_block(Device& d, Grid& g) {
    const Config& c = config;
    const uint32_t warps_threads = (g.threads_per_block + 31) / 32 * 32;
    uint64_t live = 0;
    for (uint32_t k = 0; k < c.n_sms; ++k) live += d.sm_threads[k];
    if (live + warps_threads > c.max_live_threads) return false;
    for (uint32_t k = 0; k < c.n_sms; ++k) {
        const uint32_t sm = (g.next_block + k) % c.n_sms;
        if (d.sm_threads[sm] + warps_threads > c.max_threads_per_sm || d.sm_blocks[sm] + 1 > c.max_blocks_per_sm ||
            d.sm_smem[sm] + g.smem_per_block > c.smem_per_sm)
            continue;
        d.sm_threads[sm] += warps_threads;
        d.sm_blocks[sm] += 1;
        d.sm_smem[sm] += g.smem_per_block;
        auto b = std::make_unique<Block>();
        b->grid = &g;
        b->index = g.next_block++;
        b->sm = sm;
        b->smem_bytes = g.spec.dynamic_smem;
        // An exact-size allocation, so ASan builds catch a shared-memory overrun.
        b->smem_storage.reset(new uint8_t[std::max<size_t>(b->smem_bytes, 1) + 128]);
        b->smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b->smem_storage.get()) + 127) & ~uintptr_t(127));
        std::memset(b->smem, 0xa5, b->smem_bytes);  // uninitialized shared memory is garbage, not zero
        b->warps.resize((g.threads_per_block + 31) / 32);
        b->live = g.threads_per_block;
        for (uint32_t i = 0; i < g.threads_per_block; ++i) {
            auto t = std::make_unique<Thread>();
            t->block = b.get();
            t->tid = i;
            t->fiber = std::make_unique<Fiber>(&thread_entry, t.get(), c.stack_bytes);
            t->async_fence_at = ++async_clock;  // a launch orders every earlier store before the kernel's copies
            d.ready.push_back(t.get());
            b->threads.push_back(std::move(t));
        }
        g.blocks.push_back(std::move(b));
        return true;
    }
    return false;
}

bool Engine::try_start(Device& d, Grid& g) {
    if (g.spec.cooperative && !g.started) {
        // Every block at once, or none: count the room beside the grids already resident.
        std::vector<uint32_t> threads = d.sm_threads, blocks = d.sm_blocks;
        std::vector<uint64_t> smem = d.sm_smem;
        const uint32_t tw = (g.threads_per_block + 31) / 32 * 32;
        uint32_t fit = 0;
        uint64_t live = 0;
        for (uint32_t sm = 0; sm < config.n_sms; ++sm) live += threads[sm];
        if (live + uint64_t(g.n_blocks) * tw > config.max_live_threads) return false;
        for (uint32_t sm = 0; sm < config.n_sms; ++sm)
            while (fit < g.n_blocks && threads[sm] + tw <= config.max_threads_per_sm &&
                   blocks[sm] + 1 <= config.max_blocks_per_sm && smem[sm] + g.smem_per_block <= config.smem_per_sm) {
                threads[sm] += tw;
                blocks[sm] += 1;
                smem[sm] += g.smem_per_block;
                ++fit;
            }
        if (fit < g.n_blocks) return false;
    }
    rearm_watched();  // stores before this launch are ordered before it; watch for the kernel's own
    bool placed = false;
    while (g.next_block < g.n_blocks && place_block(d, g)) placed = true;
    g.started = g.started || placed;
    return placed;
}

namespace {
std::unique_ptr<Grid> new_grid(Device& d, Stream& s, LaunchSpec spec) {
    auto g = std::make_unique<Grid>();
    g->spec = std::move(spec);
    g->id = d.next_grid_id++;
    g->stream = &s;
    g->n_blocks = g->spec.grid.x * g->spec.grid.y * g->spec.grid.z;
    g->threads_per_block = g->spec.block.x * g->spec.block.y * g->spec.block.z;
    g->smem_per_block = g->spec.dynamic_smem + 1024;
    return g;
}
}  // namespace

void Engine::service_streams(Device& d) {
    for (auto& sp : d.streams) {
        Stream& s = *sp;
        for (;;) {
            if (s.grid) {
                Grid& g = *s.grid;
                if (g.next_block < g.n_blocks) try_start(d, g);
                // A programmatic kernel next in the queue starts once every block of the running one released it.
                if (!s.dependent && s.error == cudaSuccess && g.released == g.n_blocks && !s.queue.empty() &&
                    s.queue.front().kind == Op::kernel && s.queue.front().spec.programmatic) {
                    s.dependent = new_grid(d, s, std::move(s.queue.front().spec));
                    s.queue.pop_front();
                    s.dependent->primary_running = true;
                    ++programmatic.launched, ++programmatic.started_early;
                }
                if (s.dependent && s.dependent->next_block < s.dependent->n_blocks) try_start(d, *s.dependent);
                break;
            }
            if (s.queue.empty()) break;
            Op op = std::move(s.queue.front());
            s.queue.pop_front();
            if (s.error != cudaSuccess) continue;  // work after a failure is dropped, as after a sticky error
            switch (op.kind) {
            case Op::copy:
                ensure_segv_handler();
                std::memmove(op.dst, op.src, op.bytes);
                ++d.progress;
                break;
            case Op::set:
                ensure_segv_handler();
                std::memset(op.dst, op.value, op.bytes);
                ++d.progress;
                break;
            case Op::graph:
                for (auto it = op.ops->rbegin(); it != op.ops->rend(); ++it) s.queue.push_front(*it);
                break;
            case Op::kernel: {
                if (op.spec.programmatic) ++programmatic.launched;  // its predecessor has already ended
                s.grid = new_grid(d, s, std::move(op.spec));
                try_start(d, *s.grid);
                break;
            }
            }
        }
    }
}

void Engine::thread_exited(Device& d, Thread* t) {
    Block& b = *t->block;
    Grid& g = *b.grid;
    --b.live;
    ++d.progress;
    for (const Rendezvous& r : b.warps[t->warp()])
        if (r.mask >> t->lane() & 1u) {
            g.failure = g.failure.empty() ? "block " + std::to_string(b.index) + " warp " + std::to_string(t->warp()) +
                                                " lane " + std::to_string(t->lane()) + " exited while lanes of its mask wait for it in " +
                                                collective_name(r.kind) + " at " + where_text(r.where)
                                          : g.failure;
            return;
        }
    if (b.live > 0) return;
    for (const PendingCopy& c : d.copies)
        if (c.block == &b) {
            g.failure = "block " + std::to_string(b.index) + " exited with a bulk copy (issued at " + where_text(c.where) +
                        ") still in flight into its shared memory";
            return;
        }
    const uint32_t tw = (g.threads_per_block + 31) / 32 * 32;
    d.sm_threads[b.sm] -= tw;
    d.sm_blocks[b.sm] -= 1;
    d.sm_smem[b.sm] -= g.smem_per_block;
    ++g.done_blocks;
    if (!b.released) b.released = true, ++g.released;
    // The block's fibers are finished; free them now (a big grid runs in waves).
    for (auto it = g.blocks.begin(); it != g.blocks.end(); ++it)
        if (it->get() == &b) {
            g.blocks.erase(it);
            break;
        }
}

void Engine::finish_grid(Device& d, Grid& g) {
    Stream& s = *g.stream;
    if (&g == s.grid.get()) {
        s.grid = std::move(s.dependent);  // a programmatic kernel started early now follows nothing that runs
        if (s.grid) {
            s.grid->primary_running = false;
            for (Thread* t : s.grid->griddep_waiters) wake(t);
            s.grid->griddep_waiters.clear();
        }
    } else {
        s.dependent.reset();  // it ended before the kernel it followed (it never waited for it)
    }
    ++d.progress;
}

// Ends the stream's kernels (the running one and a programmatic one started beside it) with a report.
void Engine::abort_grid(Device& d, Stream& s, const std::string& why) {
    Grid* g = s.grid.get();
    Grid* dependent = s.dependent.get();
    auto ours = [&](const Grid* x) { return x == g || (dependent && x == dependent); };
    auto mine = [&](Thread* t) { return ours(t->block->grid); };
    d.ready.erase(std::remove_if(d.ready.begin(), d.ready.end(), mine), d.ready.end());
    std::vector<SleepEntry> keep;
    while (!d.sleeping.empty()) {
        if (!mine(d.sleeping.top().thread)) keep.push_back(d.sleeping.top());
        d.sleeping.pop();
    }
    for (const SleepEntry& e : keep) d.sleeping.push(e);
    d.copies.erase(std::remove_if(d.copies.begin(), d.copies.end(), [&](const PendingCopy& c) { return ours(c.block->grid); }),
                   d.copies.end());
    for (Grid* each : {g, dependent}) {
        if (!each) continue;
        const uint32_t tw = (each->threads_per_block + 31) / 32 * 32;
        for (auto& b : each->blocks) {
            d.sm_threads[b->sm] -= tw;
            d.sm_blocks[b->sm] -= 1;
            d.sm_smem[b->sm] -= each->smem_per_block;
        }
    }
    report = "CUDA emulator: device " + std::to_string(d.ordinal) + ", kernel launch #" + std::to_string(g->id) + ": " + why;
    std::fprintf(stderr, "%s\n", report.c_str());
    s.error = cudaErrorLaunchFailure;
    s.error_text = report;
    s.queue.clear();
    s.grid.reset();
    s.dependent.reset();
    ++d.progress;
}

void Engine::run_one(Device& d, Thread* t) {
    current = t;
    t->fiber->resume();
    current = nullptr;
    ++decisions;
    d.now_ns += kNsPerDecision;
    Grid& g = *t->block->grid;
    Stream& s = *g.stream;
    if (g.failure.empty() && t->fiber->finished()) {
        t->state = ThreadState::done;
        thread_exited(d, t);  // may free t's block
        if (g.failure.empty()) {
            if (g.done_blocks == g.n_blocks) finish_grid(d, g);
            return;
        }
    }
    if (!g.failure.empty()) {
        abort_grid(d, s, g.failure);
        return;
    }
    if (t->state == ThreadState::ready) d.ready.push_back(t);
    else if (t->state == ThreadState::sleeping) d.sleeping.push({t->wake_ns, d.sleep_seq++, t});
}

void Engine::land_copy(Device& d, size_t index) {
    const PendingCopy c = d.copies[index];
    d.copies[index] = d.copies.back();
    d.copies.pop_back();
    std::memcpy(c.dst, c.src, c.bytes);
    MBarrier& m = c.block->mbarriers.at(c.bar_offset);
    m.inflight -= c.bytes;
    m.tx -= c.bytes;
    if (m.pending == 0 && m.tx == 0) {
        ++m.phase;
        m.pending = m.expected;
    }
    ++d.progress;
}

namespace {
bool stream_done(const Device& d, Until until, const Stream* stream) {
    if (until == Until::stream_idle) return stream->idle();
    if (until == Until::device_idle) {
        for (const auto& s : d.streams)
            if (!s->idle()) return false;
        return true;
    }
    return false;
}
}  // namespace

bool Engine::ahead_of_busy_peer(Device& d) {
    uint64_t peer_clocks = 0;
    bool behind = false;
    for (const auto& peer : devices) {
        if (peer.get() == &d) continue;
        peer_clocks += peer->now_ns;
        if (peer->now_ns < d.now_ns)
            for (const auto& s : peer->streams) behind = behind || s->grid;
    }
    // A peer nobody has driven since this device last gave way (a kernel its host abandoned) holds nothing up.
    if (!behind || peer_clocks == d.peer_clocks_at_yield) return false;
    d.peer_clocks_at_yield = peer_clocks;
    return true;
}

uint64_t Engine::now_ns() const {
    uint64_t t = 0;
    for (const auto& d : devices) t = std::max(t, d->now_ns);
    return t;
}

bool Engine::drive(Device& d, Until until, Stream* stream) {
    uint32_t budget = kSliceDecisions;
    for (;;) {
        service_streams(d);
        if (stream_done(d, until, stream)) return true;
        if (until == Until::slice && budget-- == 0) return true;
        if (d.progress != d.progress_seen) {
            d.progress_seen = d.progress;
            d.last_progress_ns = d.now_ns;
            d.dilation_ns = 0;
        }
        while (!d.sleeping.empty() && d.sleeping.top().wake_ns <= d.now_ns) {
            Thread* t = d.sleeping.top().thread;
            d.sleeping.pop();
            t->state = ThreadState::ready;
            d.ready.push_back(t);
        }
        if (!d.copies.empty() && (d.ready.empty() || d.random_below(256) < config.land_per_256)) {
            land_copy(d, d.random_below(uint32_t(d.copies.size())));
            continue;
        }
        if (!d.ready.empty()) {
            const uint32_t k = d.random_below(uint32_t(d.ready.size()));
            Thread* t = d.ready[k];
            d.ready[k] = d.ready.back();
            d.ready.pop_back();
            run_one(d, t);
            continue;
        }
        if (!d.sleeping.empty()) {
            // Everyone polls: jump to the next wake-up, further and further while nothing changes.
            const bool quiet = d.progress == d.progress_at_jump;
            // Peers' kernels may end this wait (TP on separate devices: their transfers bump this device's
            // counters). A quiet device whose clock is ahead of a busy peer's gives the host its turn to
            // drive that peer, so the clocks advance together and no watchdog fires on a wait a peer ends.
            if (quiet && until == Until::slice && ahead_of_busy_peer(d)) return true;
            d.progress_at_jump = d.progress;
            if (quiet) d.dilation_ns = std::min(kMaxDilationNs, std::max<uint64_t>(1000, d.dilation_ns * 2));
            d.now_ns = std::max(d.sleeping.top().wake_ns, d.now_ns + (quiet ? d.dilation_ns : 0));
            const bool stalled = d.now_ns - d.last_progress_ns > config.spin_limit_ns;
            if (!quiet || (until != Until::slice && !stalled)) continue;
            bool host_poll = false;
            for (auto copy = d.sleeping; !copy.empty(); copy.pop()) {
                const Allocation* a = find(copy.top().thread->last_load);
                host_poll = host_poll || (a && a->kind == AllocKind::host_mapped);
            }
            // Nothing changed since the last jump and someone polls host memory: the host's turn.
            if (host_poll && until == Until::slice) return true;
            if (stalled) {
                const char* headline = host_poll ? "the device waits for the host, which waits for the device (a "
                                                   "synchronization that would never return)"
                                                 : "deadlock: no thread can make progress (spinning without progress for "
                                                   "the emulator's limit)";
                // The waited-for stream's grid fails; others may still be ended by the host later.
                const std::string r = stall_report(d, headline);
                for (auto& s : d.streams)
                    if (s->grid && (!host_poll || s.get() == stream || until == Until::device_idle)) abort_grid(d, *s, r);
                return false;
            }
            continue;
        }
        // Nothing runs, sleeps or lands: every live thread is blocked for good, or a grid cannot start.
        bool any = false;
        for (auto& s : d.streams) any = any || s->grid;
        if (!any) return true;
        const std::string r = stall_report(d, "deadlock: every thread is blocked and no bulk copy is in flight");
        for (auto& s : d.streams)
            if (s->grid) abort_grid(d, *s, r);
        return false;
    }
}

std::string Engine::stall_report(const Device& d, const char* headline) const {
    std::string out = std::string(headline) + "\n";
    size_t lines = 0;
    auto line = [&](const std::string& l) {
        if (lines++ < 48) out += "  " + l + "\n";
    };
    for (const auto& sp : d.streams)
    for (const Grid* gp : {sp->grid.get(), sp->dependent.get()}) {
        if (!gp) continue;
        const Grid& g = *gp;
        if (g.next_block < g.n_blocks)
            line("kernel launch #" + std::to_string(g.id) + ": " + std::to_string(g.n_blocks - g.next_block) + " of " +
                 std::to_string(g.n_blocks) + " blocks can never become resident beside the kernels already resident" +
                 (g.spec.cooperative ? " (a cooperative launch that would wait forever)" : ""));
        for (const auto& bp : g.blocks) {
            const Block& b = *bp;
            for (uint32_t w = 0; w < b.warps.size(); ++w) {
                // Group the warp's lanes by what they wait on.
                std::map<std::string, uint32_t> groups;
                for (uint32_t l = 0; l < 32 && 32 * w + l < b.threads.size(); ++l) {
                    const Thread& t = *b.threads[32 * w + l];
                    std::string what;
                    if (t.state == ThreadState::done) what = "exited";
                    else if (t.state == ThreadState::sleeping)
                        what = std::string(t.waits_for) + " at " + where_text(t.where) + ", polling " +
                               (t.last_load ? describe(t.last_load, &b) + " (read at " + where_text(t.last_load_where) + ")"
                                            : std::string("nothing"));
                    else if (t.state == ThreadState::blocked) {
                        what = std::string(t.waits_for) + " at " + where_text(t.where);
                        if (std::string(t.waits_for) == "bar.sync") {
                            const NamedBarrier& nb = b.bars[t.wait_id];
                            what += " (barrier " + std::to_string(t.wait_id) + ": " + std::to_string(nb.arrived) + " of " +
                                    std::to_string(nb.count ? nb.count : uint32_t(b.threads.size())) +
                                    " threads arrived)";
                        } else {
                            char m[40];
                            std::snprintf(m, sizeof m, " (mask 0x%08x)", t.wait_id);
                            what += m;
                        }
                    } else what = "runnable";
                    groups[what] |= 1u << l;
                }
                if (groups.size() == 1 && groups.begin()->first == "exited") continue;
                for (const auto& [what, lanes] : groups) {
                    char m[64];
                    std::snprintf(m, sizeof m, "block %u (SM %u) warp %u lanes 0x%08x: ", b.index, b.sm, w, lanes);
                    line(m + what);
                }
            }
        }
    }
    for (const PendingCopy& c : d.copies) line("bulk copy in flight, issued at " + where_text(c.where));
    if (lines > 48) out += "  ... and " + std::to_string(lines - 48) + " more\n";
    return out;
}

}  // namespace mk_emu

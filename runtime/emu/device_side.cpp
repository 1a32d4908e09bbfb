// The emulator's device built-ins, called from the fibers: thread geometry, barriers with their
// counts checked, warp collectives at a rendezvous that checks masks, atomics and sleeps as switch
// points, mbarriers with phases and transaction counts, and bulk copies whose rules are checked and
// whose bytes land at a random later decision (the destination poisoned until then).
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/emu/engine.hpp"

namespace mk_emu {

namespace {
Thread& me() { return current_thread(); }
Block& my_block() { return *me().block; }
Device& my_device() { return *my_block().grid->stream->device; }
[[noreturn]] void fault(const std::string& what) { engine().fault(what); }
std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}
constexpr uint64_t kMbarrierSentinel = 0x6d6b2d6d62617200ull;  // "mk-mbar": an emulated barrier's word
}  // namespace

dim3 thread_idx() {
    const Thread& t = me();
    const dim3 bd = t.block->grid->spec.block;
    return dim3(t.tid % bd.x, t.tid / bd.x % bd.y, t.tid / (bd.x * bd.y));
}
dim3 block_idx() { return my_block().idx(); }
dim3 block_dim() { return my_block().grid->spec.block; }
dim3 grid_dim() { return my_block().grid->spec.grid; }
void* dynamic_shared() { return my_block().smem; }

// ---- barriers ----

namespace {
void arrive_at(uint32_t id, uint32_t count, Where where) {
    Thread& t = me();
    Block& b = *t.block;
    NamedBarrier& nb = b.bars[id];
    if (nb.arrived == 0) {
        nb.count = count;
        nb.first = where;
    } else if (nb.count != count) {
        fault("bar.sync " + std::to_string(id) + ", " + std::to_string(count) + " at " + where_text(where) +
              " meets threads that arrived with count " + std::to_string(nb.count) + " at " + where_text(nb.first));
    }
    ++nb.arrived;
    const uint32_t needed = count ? count : uint32_t(b.threads.size());  // every thread, exited or not
    if (nb.arrived > needed)
        fault("bar.sync " + std::to_string(id) + ": more threads arrived than its count " + std::to_string(count));
    if (nb.arrived == needed) {
        for (Thread* w : nb.waiting) engine().wake(w);
        nb = NamedBarrier{};
        engine().note_progress(my_device());
        return;
    }
    nb.waiting.push_back(&t);
    engine().block_current("bar.sync", where, id);
}
}  // namespace

void sync_threads(Where where) { arrive_at(0, 0, where); }

void bar_sync(uint32_t id, uint32_t count, Where where) {
    Block& b = my_block();
    if (id >= 16) fault("bar.sync " + std::to_string(id) + " at " + where_text(where) + ": barrier ids are 0..15");
    if (count == 0 || count % 32 != 0 || count > b.threads.size())
        fault("bar.sync " + std::to_string(id) + ", " + std::to_string(count) + " at " + where_text(where) +
              ": the count must be a non-zero multiple of 32 no larger than the block (" + std::to_string(b.threads.size()) +
              " threads)");
    arrive_at(id, count, where);
}

// ---- warp collectives ----

const char* collective_name(Collective k) {
    switch (k) {
    case Collective::shfl_idx: return "__shfl_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::ballot: return "__ballot_sync";
    case Collective::any: return "__any_sync";
    case Collective::all: return "__all_sync";
    case Collective::exchange: return "warp exchange (mma.sync)";
    default: return "__syncwarp";
    }
}

namespace {
// An exchange's lane: its bytes, and where the warp's go.
struct ExchangeSlot {
    const void* mine;
    void* all;
};

void complete(Rendezvous& r) {
    if (r.kind == Collective::exchange) {  // every lane of the full warp gets every lane's bytes (arg each)
        for (uint32_t l = 0; l < 32; ++l) {
            auto* to = static_cast<uint8_t*>(reinterpret_cast<const ExchangeSlot*>(r.values[l])->all);
            for (uint32_t src = 0; src < 32; ++src)
                std::memcpy(to + size_t(src) * uint32_t(r.arg), reinterpret_cast<const ExchangeSlot*>(r.values[src])->mine,
                            uint32_t(r.arg));
            r.lanes[l]->result = 0;
        }
        return;
    }
    uint64_t ballot = 0;
    for (uint32_t l = 0; l < 32; ++l)
        if (r.mask >> l & 1u && r.values[l]) ballot |= 1ull << l;
    const uint32_t width = uint32_t(r.width);
    for (uint32_t l = 0; l < 32; ++l) {
        if (!(r.mask >> l & 1u)) continue;
        const uint32_t seg = l / width * width;
        int64_t src = l;
        switch (r.kind) {
        case Collective::shfl_idx: src = seg + (uint32_t(r.arg) % width); break;
        case Collective::shfl_xor: src = l ^ uint32_t(r.arg); if (src >= seg + width) src = l; break;
        case Collective::shfl_down: src = l + r.arg; if (src >= seg + width) src = l; break;
        case Collective::shfl_up: src = int64_t(l) - r.arg; if (src < int64_t(seg)) src = l; break;
        default: break;
        }
        uint64_t out = 0;
        switch (r.kind) {
        case Collective::ballot: out = ballot; break;
        case Collective::any: out = ballot != 0; break;
        case Collective::all: out = ballot == r.mask; break;
        case Collective::syncwarp: out = 0; break;
        default:
            if (!(r.mask >> src & 1u))
                fault(std::string(collective_name(r.kind)) + " at " + where_text(r.where) + ": lane " + std::to_string(l) +
                      " reads lane " + std::to_string(src) + ", which is outside the mask " + hex(r.mask));
            out = r.values[src];
        }
        r.lanes[l]->result = out;
    }
}
}  // namespace

uint64_t warp_collective(Collective kind, uint32_t mask, uint64_t value, int32_t arg, int32_t width, Where where) {
    Thread& t = me();
    Block& b = *t.block;
    const uint32_t lane = t.lane(), warp = t.warp();
    const char* name = collective_name(kind);
    if (!(mask >> lane & 1u))
        fault(std::string(name) + " at " + where_text(where) + ": lane " + std::to_string(lane) + " is not in its mask " +
              hex(mask));
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fault(std::string(name) + " at " + where_text(where) + ": width " + std::to_string(width) + " is not a power of 2 <= 32");
    auto& open = b.warps[warp];
    Rendezvous* r = nullptr;
    for (Rendezvous& o : open)
        if (o.mask & mask) {
            if (o.mask != mask || o.kind != kind || o.arg != arg || o.width != width)
                fault("warp " + std::to_string(warp) + " lane " + std::to_string(lane) + ": " + name + " (mask " + hex(mask) +
                      ") at " + where_text(where) + " meets lanes waiting in " + collective_name(o.kind) + " (mask " +
                      hex(o.mask) + ") at " + where_text(o.where));
            r = &o;
        }
    if (!r) {
        // The mask's lanes are checked once, by the lane that opens the rendezvous (32 checks per collective,
        // not per lane: collectives are most of what the emulator does); a lane that exits later while
        // named by an open rendezvous is reported by thread_exited.
        for (uint32_t l = 0; l < 32; ++l)
            if (mask >> l & 1u) {
                const uint32_t tid = 32 * warp + l;
                if (tid >= b.threads.size())
                    fault(std::string(name) + " at " + where_text(where) + ": mask " + hex(mask) + " names lane " +
                          std::to_string(l) + ", which the block does not have");
                if (b.threads[tid]->state == ThreadState::done)
                    fault(std::string(name) + " at " + where_text(where) + ": mask " + hex(mask) + " names lane " +
                          std::to_string(l) + ", which has exited");
            }
        open.push_back(Rendezvous{kind, mask, 0, arg, width, where});
        r = &open.back();
    }
    r->values[lane] = value;
    r->lanes[lane] = &t;
    r->arrived |= 1u << lane;
    if (r->arrived == mask) {
        complete(*r);
        const uint64_t mine = t.result;
        for (uint32_t l = 0; l < 32; ++l)
            if (mask >> l & 1u && l != lane) engine().wake(r->lanes[l]);
        open.erase(open.begin() + (r - open.data()));
        engine().note_progress(my_device());
        return mine;
    }
    engine().block_current(name, where, mask);
    return t.result;
}

void sync_warp(uint32_t mask, Where where) { warp_collective(Collective::syncwarp, mask, 0, 0, 32, where); }

void warp_exchange(const void* mine, uint32_t bytes, void* all, Where where) {
    const ExchangeSlot slot{mine, all};  // on this fiber's stack: alive until every lane has copied (the rendezvous)
    warp_collective(Collective::exchange, 0xffffffffu, reinterpret_cast<uint64_t>(&slot), int32_t(bytes), 32, where);
}

// ---- memory model, sleeps, time ----

void on_atomic(const void* addr, bool write, Where where) {
    Thread& t = me();
    if (write) {
        engine().note_progress(my_device());
    } else {
        t.last_load = addr;
        t.last_load_where = where;
    }
    engine().maybe_preempt();
}

void fence(Where) { engine().maybe_preempt(); }

void nanosleep(uint32_t ns, Where where) { engine().sleep_current(ns, "__nanosleep", where); }

uint64_t global_timer_ns() { return my_device().now_ns; }

// ---- shared memory, mbarriers, bulk copies ----

uint32_t shared_address(const void* p) {
    const Block& b = my_block();
    const auto* q = static_cast<const uint8_t*>(p);
    if (q < b.smem || q >= b.smem + b.smem_bytes)
        fault("address " + engine().describe(p) + " is not in the block's shared memory (" + std::to_string(b.smem_bytes) +
              " bytes)");
    return uint32_t(q - b.smem);
}

void check_mbarrier_word(Block& b, uint32_t offset, Where where) {
    uint64_t word;
    std::memcpy(&word, b.smem + offset, 8);
    if (word != (kMbarrierSentinel | (offset & 0xff)))
        fault("mbarrier at shared memory + " + std::to_string(offset) + " (used at " + where_text(where) +
              ") was overwritten by an ordinary store since its init");
}

MBarrier& mbarrier_at(Block& b, uint64_t* bar, const char* op, Where where) {
    const auto* q = reinterpret_cast<const uint8_t*>(bar);
    if (q < b.smem || q + 8 > b.smem + b.smem_bytes)
        fault(std::string(op) + " at " + where_text(where) + ": the mbarrier " + engine().describe(bar) +
              " is not in the block's shared memory");
    const uint32_t offset = uint32_t(q - b.smem);
    if (offset % 8) fault(std::string(op) + " at " + where_text(where) + ": the mbarrier is not 8-byte aligned");
    auto it = b.mbarriers.find(offset);
    if (it == b.mbarriers.end())
        fault(std::string(op) + " at " + where_text(where) + ": the mbarrier at shared memory + " + std::to_string(offset) +
              " was never initialized");
    check_mbarrier_word(b, offset, where);
    return it->second;
}

void mbarrier_init(uint64_t* bar, uint32_t count, Where where) {
    Block& b = my_block();
    const uint32_t offset = shared_address(bar);
    if (offset % 8 || offset + 8 > b.smem_bytes) fault("mbarrier.init at " + where_text(where) + ": misaligned mbarrier");
    if (count == 0 || count >= (1u << 20)) fault("mbarrier.init at " + where_text(where) + ": count " + std::to_string(count));
    auto it = b.mbarriers.find(offset);
    if (it != b.mbarriers.end() && it->second.inflight)
        fault("mbarrier.init at " + where_text(where) + ": re-initialized with bulk copies in flight");
    b.mbarriers[offset] = MBarrier{count, count, 0, 0, 0};
    const uint64_t word = kMbarrierSentinel | (offset & 0xff);
    std::memcpy(b.smem + offset, &word, 8);
}

void mbarrier_arrive(uint64_t* bar, uint32_t tx_bytes, Where where) {
    Block& b = my_block();
    MBarrier& m = mbarrier_at(b, bar, "mbarrier.arrive", where);
    m.tx += tx_bytes;
    if (m.pending == 0) fault("mbarrier.arrive at " + where_text(where) + ": more arrivals than the barrier's count");
    --m.pending;
    if (m.pending == 0 && m.tx == 0) {
        ++m.phase;
        m.pending = m.expected;
    }
    engine().note_progress(my_device());
    engine().maybe_preempt();
}

bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, Where where) {
    Block& b = my_block();
    MBarrier& m = mbarrier_at(b, bar, "mbarrier.try_wait", where);
    if ((m.phase & 1u) != (parity & 1u)) return true;
    me().last_load = bar;
    me().last_load_where = where;
    engine().sleep_current(64, "mbarrier.try_wait", where);  // the hardware suspends a while before answering false
    return (b.mbarriers.at(uint32_t(reinterpret_cast<uint8_t*>(bar) - b.smem)).phase & 1u) != (parity & 1u);
}

void bulk_copy_global_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar, Where where) {
    Block& b = my_block();
    Device& d = my_device();
    const std::string at = "cp.async.bulk at " + where_text(where) + ": ";
    if (bytes == 0 || bytes % 16) fault(at + "size " + std::to_string(bytes) + " is not a non-zero multiple of 16");
    if (reinterpret_cast<uintptr_t>(src) % 16) fault(at + "source " + engine().describe(src) + " is not 16-byte aligned");
    if (reinterpret_cast<uintptr_t>(dst) % 16) fault(at + "destination is not 16-byte aligned");
    auto* q = static_cast<uint8_t*>(dst);
    if (q < b.smem || q + bytes > b.smem + b.smem_bytes)
        fault(at + "destination [" + engine().describe(dst) + ", +" + std::to_string(bytes) +
              ") is not inside the block's shared memory (" + std::to_string(b.smem_bytes) + " bytes)");
    uintptr_t base = 0;
    const Allocation* a = engine().find(src, &base);
    if (!a) fault(at + "source " + engine().describe(src) + " is not in device memory");
    if (reinterpret_cast<uintptr_t>(src) + bytes > base + a->bytes)
        fault(at + "source [" + engine().describe(src) + ", +" + std::to_string(bytes) + ") runs past its allocation (" +
              std::to_string(a->bytes) + " bytes)");
    MBarrier& m = mbarrier_at(b, bar, "cp.async.bulk", where);
    const uint32_t bar_offset = uint32_t(reinterpret_cast<uint8_t*>(bar) - b.smem);
    if (q < b.smem + bar_offset + 8 && b.smem + bar_offset < q + bytes)
        fault(at + "the destination overlaps its own mbarrier");
    if (m.inflight + int64_t(bytes) > m.tx)
        fault(at + std::to_string(bytes) + " bytes would complete on an mbarrier whose phase expects only " +
              std::to_string(m.tx - m.inflight) + " more transaction bytes (expect_tx missing or too small)");
    for (const PendingCopy& c : d.copies)
        if (c.block == &b && c.dst < q + bytes && q < c.dst + c.bytes)
            fault(at + "the destination overlaps a bulk copy still in flight (issued at " + where_text(c.where) + ")");
    engine().check_async_read(src, bytes, where);
    m.inflight += bytes;
    std::memset(dst, 0xff, bytes);  // poison (NaN as floats) until the copy lands
    d.copies.push_back({&b, q, static_cast<const uint8_t*>(src), bytes, bar_offset, m.phase, where});
    engine().maybe_preempt();
}

void prefetch_l2(const void* src, uint32_t bytes, Where where) {
    const std::string at = "cp.async.bulk.prefetch.L2 at " + where_text(where) + ": ";
    if (bytes == 0 || bytes % 16) fault(at + "size " + std::to_string(bytes) + " is not a non-zero multiple of 16");
    if (reinterpret_cast<uintptr_t>(src) % 16) fault(at + "source " + engine().describe(src) + " is not 16-byte aligned");
    uintptr_t base = 0;
    const Allocation* a = engine().find(src, &base);
    if (!a || reinterpret_cast<uintptr_t>(src) + bytes > base + a->bytes)
        fault(at + "[" + engine().describe(src) + ", +" + std::to_string(bytes) + ") is not inside one allocation");
}

void prefetch_l1(const void* p, Where where) {
    // The hardware takes a hint anywhere in the global window; an address outside every allocation is a bug here.
    uintptr_t base = 0;
    if (!engine().find(p, &base))
        fault("prefetch.global.L1 at " + where_text(where) + ": " + engine().describe(p) + " is not in an allocation");
}

// ---- programmatic dependent launch ----

// A block releases the stream's next programmatic kernel at its first launch_dependents (or when it exits): the
// earliest the hardware may start that kernel, so a dependent that reads its predecessor's output before
// griddepcontrol.wait reads it unfinished here.
void griddep_launch_dependents(Where) {
    Block& b = my_block();
    if (!b.released) b.released = true, ++b.grid->released;
    engine().maybe_preempt();
}

// Blocks (as the hardware does: no polling) until the kernel this one follows has ended; finish_grid wakes it.
void griddep_wait(Where where) {
    Grid& g = *my_block().grid;
    while (g.primary_running) {
        g.griddep_waiters.push_back(&me());
        engine().block_current("griddepcontrol.wait", where, 0);
    }
}

void fence_proxy_async(Where) {
    engine().fence_async();
    engine().maybe_preempt();
}

}  // namespace mk_emu

// The CUDA emulator's engine (internal): devices with SMs and residency, grids of blocks whose threads
// are fibers, the one seeded scheduler per device that decides every switch, barriers, warp
// rendezvous, mbarriers, in-flight bulk copies, virtual time, and the deadlock report. The host API
// (runtime_api.cpp) drives a device from the calling host thread: the device runs only inside API
// calls (synchronize, query, blocking copies), so a run is a deterministic function of the seed and
// the host's calls. One global lock serializes all of it.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "mk_emu/device.hpp"
#include "mk_emu/emulator.hpp"
#include "mk_emu/runtime_api.hpp"
#include "runtime/emu/fiber.hpp"

namespace mk_emu {

struct Block;
struct Grid;
struct Device;

enum class ThreadState { ready, blocked, sleeping, done };

struct Thread {
    Block* block = nullptr;
    uint32_t tid = 0;  // linear index in the block
    std::unique_ptr<Fiber> fiber;
    ThreadState state = ThreadState::ready;
    uint64_t wake_ns = 0;
    const char* waits_for = "";  // what a blocked or sleeping thread waits on
    Where where{};
    uint32_t wait_id = 0;          // barrier id, or collective mask
    const void* last_load = nullptr;  // the last atomic read: what a poll waits on
    Where last_load_where{};
    uint64_t result = 0;           // a warp collective's value for this lane
    uint64_t async_fence_at = 0;   // the async-proxy clock at its last fence.proxy.async (or its launch)
    uint32_t lane() const { return tid % 32; }
    uint32_t warp() const { return tid / 32; }
};

struct NamedBarrier {
    uint32_t count = 0;  // 0: __syncthreads (every thread of the block)
    uint32_t arrived = 0;
    Where first{};
    std::vector<Thread*> waiting;
};

struct Rendezvous {
    Collective kind;
    uint32_t mask = 0, arrived = 0;
    int32_t arg = 0, width = 32;
    Where where{};
    uint64_t values[32] = {};
    Thread* lanes[32] = {};
};

struct MBarrier {
    uint32_t expected = 0, pending = 0;
    int64_t tx = 0;        // transaction bytes still expected in this phase
    int64_t inflight = 0;  // bytes of bulk copies issued on it that have not landed
    uint64_t phase = 0;    // completed phases
};

struct PendingCopy {
    Block* block;
    uint8_t* dst;
    const uint8_t* src;
    uint32_t bytes;
    uint32_t bar_offset;
    uint64_t phase;
    Where where;
};

struct Block {
    Grid* grid = nullptr;
    uint32_t index = 0;  // linear block index
    uint32_t sm = 0;
    std::vector<std::unique_ptr<Thread>> threads;
    uint32_t live = 0;
    std::unique_ptr<uint8_t[]> smem_storage;
    uint8_t* smem = nullptr;  // dynamic shared memory, 128-byte aligned
    size_t smem_bytes = 0;
    NamedBarrier bars[16];
    std::vector<std::vector<Rendezvous>> warps;  // open collectives per warp
    std::unordered_map<uint32_t, MBarrier> mbarriers;  // by shared-memory offset
    bool released = false;  // ran griddepcontrol.launch_dependents, or exited (counted in Grid::released)
    dim3 idx() const;
};

struct Grid {
    LaunchSpec spec;
    uint64_t id = 0;
    Stream* stream = nullptr;
    uint32_t n_blocks = 0, threads_per_block = 0, next_block = 0, done_blocks = 0;
    uint64_t smem_per_block = 0;  // with the 1 KiB the hardware reserves per block
    std::vector<std::unique_ptr<Block>> blocks;  // resident (or finished, until the grid ends)
    std::string failure;
    bool started = false;
    uint32_t released = 0;         // blocks that let a programmatic dependent start (launch_dependents or exit)
    bool primary_running = false;  // launched programmatically while the kernel before it still runs
    std::vector<Thread*> griddep_waiters;  // blocked in griddepcontrol.wait until that kernel ends
};

struct Op {
    enum Kind { kernel, copy, set, graph } kind;
    LaunchSpec spec{};
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    int value = 0;
    std::shared_ptr<const std::vector<Op>> ops;
};

struct GraphRecord {
    std::shared_ptr<const std::vector<Op>> ops;
};

struct Stream {
    Device* device = nullptr;
    bool blocking = true;
    std::deque<Op> queue;
    std::unique_ptr<Grid> grid;  // the kernel it runs (or waits to make resident)
    // A programmatic kernel started before `grid` ended (every block of `grid` released it); it becomes `grid`
    // when `grid` ends.
    std::unique_ptr<Grid> dependent;
    cudaError_t error = cudaSuccess;
    std::string error_text;
    std::unique_ptr<std::vector<Op>> capture;
    bool idle() const { return queue.empty() && !grid && !dependent; }
};

struct SleepEntry {
    uint64_t wake_ns, seq;
    Thread* thread;
    bool operator>(const SleepEntry& o) const { return wake_ns != o.wake_ns ? wake_ns > o.wake_ns : seq > o.seq; }
};

struct Device {
    int ordinal = 0;
    std::vector<std::unique_ptr<Stream>> streams;  // [0]: the default (legacy) stream
    std::vector<uint32_t> sm_threads, sm_blocks;
    std::vector<uint64_t> sm_smem;
    std::vector<Thread*> ready;
    std::priority_queue<SleepEntry, std::vector<SleepEntry>, std::greater<>> sleeping;
    uint64_t sleep_seq = 0;
    std::vector<PendingCopy> copies;
    uint64_t now_ns = 0;
    uint64_t progress = 0, progress_seen = 0, progress_at_jump = 0, last_progress_ns = 0, dilation_ns = 0;
    uint64_t rng = 0;
    uint64_t next_grid_id = 1;
    uint64_t peer_clocks_at_yield = 0;  // the other devices' clocks summed when this one last gave way to them
    std::map<const void*, int> max_dynamic_smem;

    explicit Device(int ordinal);
    uint64_t random();
    uint32_t random_below(uint32_t n) { return uint32_t(random() % n); }
};

// A page of device memory a bulk copy has read: write-protected while armed, so the first generic store
// into it after each fence.proxy.async (any thread's) is caught by the SIGSEGV handler and stamped.
struct WatchedPage {
    bool armed = false;
    uint64_t written_at = 0;  // the async-proxy clock when a device store was last caught (0: never)
    uint32_t writer_block = 0, writer_tid = 0;
};

enum class AllocKind { device, host_mapped };
struct Allocation {
    size_t bytes;
    AllocKind kind;
    int device;
    uint32_t id;
    void* raw;  // what free() takes
};

// What a drive of the device stops on.
enum class Until { stream_idle, device_idle, slice };

class Engine {
public:
    static Engine& get();
    std::recursive_mutex mutex;
    Config config;
    std::vector<std::unique_ptr<Device>> devices;
    std::map<uintptr_t, Allocation> allocations;
    uint32_t next_alloc_id = 1;
    Thread* current = nullptr;  // the thread whose fiber is running
    // The bulk-copy-after-generic-store check (async_proxy.cpp): pages bulk copies read, by address; those
    // written since the last re-arm; a clock ordering fences and caught stores.
    std::map<uintptr_t, WatchedPage> watched;
    std::vector<uintptr_t> dirty;
    uint64_t async_clock = 0;
    std::string report;
    uint64_t decisions = 0;
    ProgrammaticLaunches programmatic;  // kernels launched programmatically, and those started early

    void reset(const Config& c);
    Device& device(int ordinal) { return *devices.at(size_t(ordinal)); }
    const Allocation* find(const void* p, uintptr_t* base = nullptr) const;
    // What `p` is: an allocation and offset, or `block`'s (default: the running thread's) shared memory.
    std::string describe(const void* p, const Block* block = nullptr) const;

    // Runs `d` until the stream is idle (Until::stream_idle), every stream is (device_idle), or for a slice.
    // Returns false when the device can make no more progress without the host (a sync would wait forever).
    bool drive(Device& d, Until until, Stream* stream);
    // The furthest any device's virtual clock has advanced (what the host's bounds are measured on).
    uint64_t now_ns() const;

    // Fiber side.
    [[noreturn]] void fault(const std::string& what);
    void block_current(const char* waits_for, Where where, uint32_t id);
    void sleep_current(uint64_t ns, const char* waits_for, Where where);
    void maybe_preempt();
    void wake(Thread* t);
    void note_progress(Device& d) { ++d.progress; }

private:
    void service_streams(Device& d);
    bool try_start(Device& d, Grid& g);
    bool place_block(Device& d, Grid& g);
    void run_one(Device& d, Thread* t);
    void thread_exited(Device& d, Thread* t);
    void finish_grid(Device& d, Grid& g);
    void abort_grid(Device& d, Stream& s, const std::string& why);
    void land_copy(Device& d, size_t index);
    std::string stall_report(const Device& d, const char* headline) const;
    bool ahead_of_busy_peer(Device& d);  // another device runs a kernel and its clock is behind

public:
    // async_proxy.cpp. A bulk copy by the running thread reads [src, src + bytes) of device memory: reports
    // (fault) a page generic stores wrote after the thread's last fence.proxy.async, then watches the pages.
    void check_async_read(const void* src, uint32_t bytes, Where where);
    void fence_async();            // the running thread's fence.proxy.async: stamps it, re-arms written pages
    void rearm_watched();          // write-protects again every watched page written since the last re-arm
    void unwatch(uintptr_t base, size_t bytes);  // before an allocation is freed
    void ensure_segv_handler();    // before anything may store into an armed page (a launch, a host copy)
    static size_t page_bytes();
};

inline Engine& engine() { return Engine::get(); }
inline Thread& current_thread() { return *engine().current; }
MBarrier& mbarrier_at(Block& b, uint64_t* bar, const char* op, Where where);
void check_mbarrier_word(Block& b, uint32_t offset, Where where);
std::string where_text(Where w);
const char* collective_name(Collective kind);  // "__shfl_xor_sync", ...

}  // namespace mk_emu

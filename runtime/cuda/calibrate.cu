// Micro-kernels that measure the device cost model's constants (calibrate.hpp), each doing what the resident
// interpreter does where it pays the cost: its team of 7 consumer warps, its barriers and release adds
// (sync.cuh), its row dot (dev::row_dot), its loader's bulk copies into mbarrier-completed pages. Every kernel
// times a loop with the global timer, long enough on a device (>= ~100 us) that the timer's granularity is
// noise; each value is the median of several launches.
#include <cuda_runtime.h>

#include "runtime/cuda/calibrate.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "instructions/common/device_math.cuh"
#include "instructions/common/ptx.cuh"
#include "models/error.hpp"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/cuda/sync.cuh"

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

#if defined(MK_CUDA_EMU)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
// Loop counts and sizes: a device's, or a handful on the emulator (every device thread is a fiber there).
constexpr uint32_t scaled(uint32_t device, uint32_t emulated) { return kEmulated ? emulated : device; }

using ptx::global_timer_ns;
constexpr uint32_t kSlotWords = 32;                          // a pointer chain's slot: one 128-byte line
constexpr uint32_t kTeamThreads = 32 * kInterpreterConsumerWarps;  // warps 1..7, as in the interpreter
constexpr uint32_t kPageBytes = 16384;                       // the H200 target's page
constexpr uint32_t kRowCols = 2048;                          // BF16 rows of the Llama-3.2-1B d_model: 4 a page
constexpr uint32_t kRows = kPageBytes / (2 * kRowCols);
constexpr uint32_t kFillPages = 8;

__device__ inline uint32_t relaxed_load(const uint32_t* p) {
    return cuda::atomic_ref<const uint32_t, cuda::thread_scope_device>(*p).load(cuda::memory_order_relaxed);
}

// SM cycles against the global timer over ~1 ms of sleeps.
__global__ void clock_rate(uint32_t sleeps, uint64_t* out) {
    const uint64_t t0 = global_timer_ns(), c0 = ptx::clock_cycles();
    for (uint32_t i = 0; i < sleeps; ++i) __nanosleep(1000);
    out[1] = ptx::clock_cycles() - c0;
    out[0] = global_timer_ns() - t0;
}

// A pointer chain over n_slots lines: step i sits in slot i * stride % n_slots (stride odd, n_slots a power of
// two: distinct slots for `length` <= n_slots steps, far apart, so neither the L1 nor a prefetch helps).
__global__ void build_chain(uint32_t* words, uint32_t n_slots, uint32_t stride, uint32_t length) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < length; i += gridDim.x * blockDim.x) {
        const uint32_t slot = uint32_t(uint64_t(i) * stride % n_slots);
        const uint32_t next = uint32_t(uint64_t((i + 1) % length) * stride % n_slots);
        words[size_t(slot) * kSlotWords] = next * kSlotWords;
    }
}

// One thread follows the chain, each load's address the last one's value: relaxed device-scope loads, which the
// L1 does not serve, as the interpreter loads its counters.
__global__ void chase(const uint32_t* words, uint32_t start, uint32_t steps, uint64_t* ns, uint32_t* sink) {
    uint32_t at = start;
    const uint64_t t0 = global_timer_ns();
    for (uint32_t s = 0; s < steps; ++s) at = relaxed_load(words + at);
    ns[0] = global_timer_ns() - t0;
    sink[0] = at;
}

// The same over pinned host memory, with the system-scope acquire loads the interpreter reads host flags with.
__global__ void chase_host(const volatile uint32_t* words, uint32_t steps, uint64_t* ns, uint32_t* sink) {
    uint32_t at = 0;
    const uint64_t t0 = global_timer_ns();
    for (uint32_t s = 0; s < steps; ++s) at = cuda_sync::system_load(words + at);
    ns[0] = global_timer_ns() - t0;
    sink[0] = at;
}

// One warp, n independent byte loads a lane from two lines the L1 holds after the first trip (decode_args' byte
// loads before issue 20).
__global__ void byte_loads(const uint8_t* bytes, uint32_t n, uint64_t* ns, uint32_t* sink) {
    const uint32_t lane = threadIdx.x;
    uint32_t acc = 0;
    const uint64_t t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i) acc += bytes[(i * 37u + lane) & 255u];
    if (lane == 0) ns[0] = global_timer_ns() - t0;
    sink[lane] = acc;
}

// The consumer team (warps 1..7 of 8, warp 0 idle as the controller is): n team barriers.
__global__ void team_barriers(uint32_t n, uint64_t* ns) {
    if (threadIdx.x < 32) return;
    const Team team{threadIdx.x - 32, kTeamThreads, 1};
    const uint64_t t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i) team.sync();
    if (team.rank == 0) ns[0] = global_timer_ns() - t0;
}

// An instruction's end, n times: every team thread stores its output, the team barrier, one thread signals the
// counter (release: the interpreter's release_add, whose fence waits for the team's stores; or relaxed: no
// fence), the barrier after. The difference of the two is what the fence costs.
__global__ void team_signals(float* out, uint64_t* counter, uint32_t n, uint32_t release, uint64_t* ns) {
    if (threadIdx.x < 32) return;
    const Team team{threadIdx.x - 32, kTeamThreads, 1};
    const uint64_t t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i) {
        out[size_t(i) * kTeamThreads + team.rank] = float(i + team.rank);
        team.sync();
        if (team.rank == 0) {
            if (release) cuda_sync::release_add(counter, 1);
            else cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*counter).fetch_add(1, cuda::memory_order_relaxed);
        }
        team.sync();
    }
    if (team.rank == 0) ns[0] = global_timer_ns() - t0;
}

// post_token's hand-off: a store to mapped host memory, then a system-scope fence (or none), n times.
__global__ void host_stores(volatile uint32_t* host, uint32_t n, uint32_t fence, uint64_t* ns) {
    const uint64_t t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i) {
        host[(i % 8) * kSlotWords] = i;
        if (fence) __threadfence_system();
    }
    ns[0] = global_timer_ns() - t0;
}

// A counter wait as the interpreter's: relaxed polls until the target, then one acquire load.
__device__ inline void spin_until(const uint64_t* counter, uint64_t target) {
    while (cuda::atomic_ref<const uint64_t, cuda::thread_scope_device>(*counter).load(cuda::memory_order_relaxed) <
           target) {
    }
    (void)cuda_sync::acquire_load(counter);
}

// Two blocks on two SMs (each asks for over half an SM's shared memory) signal each other in turn, n round trips:
// a hop is a release add on one SM seen by the other's poll.
__global__ void ping_pong(uint64_t* counters, uint32_t n, uint64_t* ns) {
    if (threadIdx.x != 0) return;
    uint64_t* mine = counters + 16 * blockIdx.x;  // 128 bytes apart: separate lines
    const uint64_t* theirs = counters + 16 * (1 - blockIdx.x);
    const uint64_t t0 = global_timer_ns();
    for (uint64_t i = 1; i <= n; ++i) {
        if (blockIdx.x == 0) {
            cuda_sync::release_add(mine, 1);
            spin_until(theirs, i);
        } else {
            spin_until(theirs, i);
            cuda_sync::release_add(mine, 1);
        }
    }
    if (blockIdx.x == 0) ns[0] = global_timer_ns() - t0;
}

// One warp: n dependent shuffles (mode 0), or n dependent warp sums (dev::warp_sum, 5 shuffles and adds: mode 1),
// or n online-softmax steps as attn_partial takes one a trip (a max, two expf and the rescale: mode 2).
__global__ void warp_chains(uint32_t n, uint32_t mode, uint64_t* ns, float* sink) {
    const uint32_t lane = threadIdx.x;
    float v = float(lane) * 0.01f, m = -1e30f, l = 0.0f;
    const uint64_t t0 = global_timer_ns();
    if (mode == 0)
        for (uint32_t i = 0; i < n; ++i) v = __shfl_xor_sync(0xffffffffu, v, int(1 + (i & 15)));
    else if (mode == 1)
        for (uint32_t i = 0; i < n; ++i) v = dev::warp_sum(v) * 0.03125f;
    else
        for (uint32_t i = 0; i < n; ++i) {
            const float m_new = fmaxf(m, v);
            const float correction = expf(m - m_new), p = expf(v - m_new);
            l = l * correction + p;
            m = m_new;
            v = v * 0.5f + p;  // the next score depends on this step, so the steps cannot overlap
        }
    if (lane == 0) ns[0] = global_timer_ns() - t0;
    sink[lane] = v + l;
}

// Warps 0..n_warps-1 each dot a page of BF16 rows n times with dev::row_dot (the matvec's), the vector in shared
// memory or read from global memory with plain loads (L2, and L1 where it keeps the 8 KiB, as in the interpreter).
// Each dot's row depends on the last dot, as a warp's rows follow each other in the interpreter.
__global__ void row_dots(const uint8_t* page_global, const float* x_global, uint32_t x_in_smem, uint32_t n_warps,
                         uint32_t n, uint64_t* ns, float* sink) {
    MK_DYNAMIC_SHARED(uint8_t, smem, 16);
    uint8_t* page = smem;
    float* x = reinterpret_cast<float*>(smem + kPageBytes);
    for (uint32_t i = threadIdx.x; i < kPageBytes / 4; i += blockDim.x)
        reinterpret_cast<uint32_t*>(page)[i] = reinterpret_cast<const uint32_t*>(page_global)[i];
    for (uint32_t i = threadIdx.x; i < kRowCols; i += blockDim.x) x[i] = x_global[i];
    __syncthreads();
    const float* vector = x_in_smem ? x : x_global;
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint64_t t0 = 0;
    if (threadIdx.x == 0) t0 = global_timer_ns();
    float acc = 0.0f;
    if (warp < n_warps)
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t row = (i + warp + (acc != acc ? 1u : 0u)) % kRows;
            acc += dev::row_dot(uint32_t(DType::BF16), page + row * 2 * kRowCols, dev::PlainVector{vector}, kRowCols,
                                lane);
        }
    __syncthreads();
    if (threadIdx.x == 0) ns[0] = global_timer_ns() - t0;
    sink[threadIdx.x] = acc;
}

// Each warp issues 4 independent chains of mma.m16n8k16 (BF16 in, fp32 accumulate), n each.
__global__ void mma_chains(uint32_t n, uint64_t* ns, float* sink) {
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t one = 0x3c003c00u + lane;  // bf16 pairs near 2^-7
    const uint32_t a[4] = {one, one, one, one}, b[2] = {one, one};
    float d[4][4] = {};
    __syncthreads();
    uint64_t t0 = 0;
    if (threadIdx.x == 0) t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t k = 0; k < 4; ++k) ptx::mma_m16n8k16_bf16(d[k], a, b, d[k]);
    __syncthreads();
    if (threadIdx.x == 0) ns[0] = global_timer_ns() - t0;
    sink[threadIdx.x] = d[0][0] + d[1][1] + d[2][2] + d[3][3];
}

// Each thread runs 8 independent chains of fp32 multiply-adds (one instruction each, full rate: 128 lanes a clock
// per SM, where integer multiply-adds run at half), n rounds of 4 per chain: with 8 warps, each scheduler has
// 2 warps x 8 chains in flight, past the FFMA latency.
__global__ void issue_chains(uint32_t n, uint64_t* ns, float* sink) {
    float x[8];
    for (uint32_t k = 0; k < 8; ++k) x[k] = float(threadIdx.x + k);
    __syncthreads();
    uint64_t t0 = 0;
    if (threadIdx.x == 0) t0 = global_timer_ns();
    for (uint32_t i = 0; i < n; ++i)
#pragma unroll
        for (uint32_t r = 0; r < 4; ++r)
#pragma unroll
            for (uint32_t k = 0; k < 8; ++k) x[k] = x[k] * 0.999f + 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) ns[0] = global_timer_ns() - t0;
    float all = 0;
    for (uint32_t k = 0; k < 8; ++k) all += x[k];
    sink[threadIdx.x] = all;
}

// The loader's fill: one thread a block streams the block's share of `src` into a ring of kFillPages pages with
// cp.async.bulk, each page's mbarrier completed by its bytes, a page refilled once its last fill has landed.
// Page i of block b is page (b * pages_per_block + i) mod src_pages of `src` (src_pages small: an L2-resident source).
__global__ void fill_pages(const uint8_t* src, uint32_t src_pages, uint32_t pages_per_block, uint64_t* start_ns,
                           uint64_t* end_ns) {
    MK_DYNAMIC_SHARED(uint8_t, smem, 128);
    if (threadIdx.x != 0) return;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kFillPages * kPageBytes);
    for (uint32_t p = 0; p < kFillPages; ++p) ptx::mbarrier_init(&bars[p], 1);
    ptx::fence_mbarrier_init();
    const uint64_t first = uint64_t(blockIdx.x) * pages_per_block;
    start_ns[blockIdx.x] = global_timer_ns();
    for (uint32_t i = 0; i < pages_per_block; ++i) {
        const uint32_t slot = i % kFillPages;
        if (i >= kFillPages)
            while (!ptx::mbarrier_try_wait(&bars[slot], (i / kFillPages - 1) & 1u)) {
            }
        ptx::mbarrier_arrive_expect_tx(&bars[slot], kPageBytes);
        ptx::bulk_copy_to_shared(smem + slot * kPageBytes, src + (first + i) % src_pages * kPageBytes, kPageBytes,
                                 &bars[slot]);
    }
    for (uint32_t i = pages_per_block > kFillPages ? pages_per_block - kFillPages : 0; i < pages_per_block; ++i)
        while (!ptx::mbarrier_try_wait(&bars[i % kFillPages], (i / kFillPages) & 1u)) {
        }
    end_ns[blockIdx.x] = global_timer_ns();
}

// ---- host side ----

void check(cudaError_t status, const char* step) {
    if (status == cudaSuccess) return;
    cudaGetLastError();
    fail("calibrate: {}: {}", step, cudaGetErrorString(status));
}

struct Buffer {
    void* p = nullptr;
    Buffer(size_t bytes, const char* step) {
        check(cudaMalloc(&p, bytes), step);
        check(cudaMemset(p, 0, bytes), step);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { cudaFree(p); }
    template <class T>
    T* as() const { return static_cast<T*>(p); }
};

struct HostBuffer {
    void* host = nullptr;
    void* device = nullptr;
    HostBuffer(size_t bytes, const char* step) {
        check(cudaHostAlloc(&host, bytes, cudaHostAllocMapped), step);
        check(cudaHostGetDevicePointer(&device, host, 0), step);
    }
    HostBuffer(const HostBuffer&) = delete;
    HostBuffer& operator=(const HostBuffer&) = delete;
    ~HostBuffer() { cudaFreeHost(host); }
};

template <class... P>
void launch(const char* step, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
            std::type_identity_t<P>... args) {
    void* list[] = {static_cast<void*>(&args)...};
    check(cudaLaunchKernel(kernel, grid, block, list, smem, nullptr), step);
    check(cudaDeviceSynchronize(), step);
}

uint64_t read_u64(const uint64_t* device, const char* step) {
    uint64_t v = 0;
    check(cudaMemcpy(&v, device, sizeof v, cudaMemcpyDeviceToHost), step);
    return v;
}

// The median of `repeats` runs of measure() (each returns a value).
template <class Measure>
double median_of(uint32_t repeats, Measure&& measure) {
    std::vector<double> values;
    for (uint32_t r = 0; r < repeats; ++r) values.push_back(measure(r));
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

}  // namespace

Calibration run_calibration() {
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
    Calibration c;
    c.device = props.name;
    c.sms = uint32_t(props.multiProcessorCount);
    c.emulated = kEmulated;
    const uint32_t repeats = scaled(5, 3);
    auto constant = [&](const char* key, double value, const std::string& how) {
        for (const CalibrationKey& k : calibration_keys())
            if (std::string(k.key) == key) c.constants.push_back({key, value, k.unit, how});
    };
    Buffer ns(64, "timer results"), sink(4096, "sink");
    uint64_t* t = ns.as<uint64_t>();

    // The SM clock: an observation that says how the device ran (nanoseconds below are wall time).
    launch("clock", clock_rate, 1, 32, 0, scaled(1000, 4), t);
    const double ghz = double(read_u64(t + 1, "clock")) / double(std::max<uint64_t>(read_u64(t, "clock"), 1));
    c.observations.push_back({"sm_clock_ghz", ghz, "GHz", "clock64 against the global timer over ~1 ms of __nanosleep"});

    {  // L2: a warm 256 KiB chain; DRAM: windows of a chain over 256 MiB, the L2 flushed by a 256 MiB memset each time
       // (the H200's L2 is 50 MiB).
        const uint32_t l2_slots = scaled(2048, 64), steps = scaled(4096, 32);
        Buffer l2(size_t(l2_slots) * kSlotWords * 4, "L2 chain");
        launch("L2 chain", build_chain, 8, 256, 0, l2.as<uint32_t>(), l2_slots, 1031u, l2_slots);
        auto l2_chase = [&](uint32_t) {
            launch("L2 chase", chase, 1, 1, 0, l2.as<const uint32_t>(), 0u, steps, t, sink.as<uint32_t>());
            return double(read_u64(t, "L2 chase")) / steps;
        };
        l2_chase(0);  // warms the L2 (and the TLB)
        const double l2_ns = median_of(repeats, l2_chase);
        constant("l2_load_ns", l2_ns,
                 fmt::format("one thread's chain of {} dependent relaxed loads over {} lines ({} KiB) in L2, warmed", steps,
                             l2_slots, l2_slots * kSlotWords * 4 / 1024));
        const uint32_t dram_slots = scaled(1u << 21, 256), evict_bytes = scaled(256u << 20, 64u << 10);
        Buffer dram(size_t(dram_slots) * kSlotWords * 4, "DRAM chain"), evict(evict_bytes, "L2 flush");
        const uint32_t stride = 0x9E3779B1u % dram_slots | 1u;
        launch("DRAM chain", build_chain, scaled(264, 2), 256, 0, dram.as<uint32_t>(), dram_slots, stride,
               steps * repeats);
        const double dram_ns = median_of(repeats, [&](uint32_t r) {
            check(cudaMemset(evict.p, int(r + 1), evict_bytes), "L2 flush");
            const uint32_t start = uint32_t(uint64_t(r) * steps * stride % dram_slots) * kSlotWords;
            launch("DRAM chase", chase, 1, 1, 0, dram.as<const uint32_t>(), start, steps, t, sink.as<uint32_t>());
            return double(read_u64(t, "DRAM chase")) / steps;
        });
        constant("dram_load_ns", dram_ns,
                 fmt::format("one thread's chain of {} dependent relaxed loads over distinct lines of a {} KiB buffer, "
                             "L2 flushed by a {} KiB memset before each run (TLB misses included)", steps,
                             size_t(dram_slots) * kSlotWords * 4 / 1024, evict_bytes / 1024));
    }
    {
        const uint32_t n = scaled(1024, 16);
        HostBuffer host(64 * kSlotWords * 4, "pinned host memory");
        auto* words = static_cast<uint32_t*>(host.host);
        for (uint32_t i = 0; i < 64; ++i) words[i * kSlotWords] = (i * 29 + 29) % 64 * kSlotWords;  // one 64-cycle
        const double pcie = median_of(repeats, [&](uint32_t) {
            launch("PCIe chase", chase_host, 1, 1, 0, static_cast<const volatile uint32_t*>(host.device), n, t,
                   sink.as<uint32_t>());
            return double(read_u64(t, "PCIe chase")) / n;
        });
        constant("pcie_read_ns", pcie, fmt::format("one thread's chain of {} dependent system-scope acquire loads of "
                                                   "pinned, mapped host memory", n));
        auto stores = [&](uint32_t fence) {
            return median_of(repeats, [&](uint32_t) {
                launch("host stores", host_stores, 1, 1, 0, static_cast<volatile uint32_t*>(host.device), n, fence, t);
                return double(read_u64(t, "host stores")) / n;
            });
        };
        constant("system_fence_ns", std::max(0.0, stores(1) - stores(0)),
                 fmt::format("{} stores to mapped host memory each followed by __threadfence_system, less the same "
                             "stores without", n));
    }
    {
        Buffer bytes(256, "byte loads");
        const uint32_t n = scaled(65536, 32);  // ~1-2 ns each: 65536 keep the loop near 100 us
        const double per = median_of(repeats, [&](uint32_t) {
            launch("byte loads", byte_loads, 1, 32, 0, bytes.as<const uint8_t>(), n, t, sink.as<uint32_t>());
            return double(read_u64(t, "byte loads")) / n;
        });
        constant("byte_load_ns", per, fmt::format("one warp's {} independent LDG.E.U8 a lane from 256 bytes in L1", n));
    }
    {
        const uint32_t n = scaled(4096, 16);
        const double per = median_of(repeats, [&](uint32_t) {
            launch("team barriers", team_barriers, 1, kInterpreterThreads, 0, n, t);
            return double(read_u64(t, "team barriers")) / n;
        });
        constant("barrier_ns", per, fmt::format("{} bar.sync of the 224-thread consumer team (warps 1..7 of 8)", n));
    }
    {
        const uint32_t n = scaled(1024, 8);
        Buffer out(size_t(n) * kTeamThreads * 4, "team outputs"), counter(128, "counter");
        auto signals = [&](uint32_t release) {
            return median_of(repeats, [&](uint32_t) {
                launch("team signals", team_signals, 1, kInterpreterThreads, 0, out.as<float>(), counter.as<uint64_t>(),
                       n, release, t);
                return double(read_u64(t, "team signals")) / n;
            });
        };
        constant("fence_ns", std::max(0.0, signals(1) - signals(0)),
                 fmt::format("{} instruction ends (the team's 224 stores, barrier, one counter add, barrier): a "
                             "release add (sync.cuh's release_add) less a relaxed one", n));
    }
    {
        const uint32_t n = scaled(2048, 16);
        Buffer counters(256, "hop counters");
        const size_t smem = props.sharedMemPerBlockOptin / 2 + 1024;  // over half an SM: the blocks sit on two SMs
        check(cudaFuncSetAttribute(ping_pong, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "hop smem");
        const double hop = median_of(repeats, [&](uint32_t) {
            check(cudaMemset(counters.p, 0, 256), "hop counters");
            launch("ping-pong", ping_pong, 2, 32, smem, counters.as<uint64_t>(), n, t);
            return double(read_u64(t, "ping-pong")) / (2.0 * n);
        });
        constant("hop_ns", hop, fmt::format("{} round trips between two SMs, each a release add seen by the other's "
                                            "relaxed polls (no back-off) and acquire: half a round trip", n));
    }
    {
        auto chain = [&](uint32_t mode, uint32_t n) {
            return median_of(repeats, [&](uint32_t) {
                launch("warp chains", warp_chains, 1, 32, 0, n, mode, t, sink.as<float>());
                return double(read_u64(t, "warp chains")) / n;
            });
        };
        const uint32_t n = scaled(4096, 16), n_shuffles = scaled(32768, 16);  // a shuffle is ~10-25 ns
        constant("shuffle_ns", chain(0, n_shuffles),
                 fmt::format("one warp's chain of {} dependent SHFL.BFLY", n_shuffles));
        constant("warp_reduce_ns", chain(1, n), fmt::format("one warp's chain of {} dev::warp_sum (5 shuffles)", n));
        constant("exp_ns", chain(2, n), fmt::format("one warp's chain of {} online-softmax steps (max, 2 expf, rescale)", n));
    }
    {
        Buffer page(kPageBytes, "row page"), x(kRowCols * 4, "row vector");
        std::vector<uint16_t> bf16(kPageBytes / 2);
        for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = uint16_t(0x3c00u + i % 97);  // ~2^-7, varied
        check(cudaMemcpy(page.p, bf16.data(), kPageBytes, cudaMemcpyHostToDevice), "row page");
        const uint32_t n = scaled(1024, 2);
        const size_t smem = kPageBytes + kRowCols * 4;
        auto cols_per_ns = [&](uint32_t in_smem, uint32_t warps) {
            return median_of(repeats, [&](uint32_t) {
                launch("row dots", row_dots, 1, kInterpreterThreads, smem, page.as<const uint8_t>(), x.as<const float>(),
                       in_smem, warps, n, t, sink.as<float>());
                return double(warps) * n * kRowCols / double(std::max<uint64_t>(read_u64(t, "row dots"), 1));
            });
        };
        const std::string what = fmt::format("{} dev::row_dot of 2048-column BF16 rows from a 16 KiB page in shared "
                                             "memory", n);
        constant("warp_cols_smem_per_ns", cols_per_ns(1, 1), "one warp's " + what + ", the fp32 vector in shared memory");
        constant("warp_cols_l2_per_ns", cols_per_ns(0, 1),
                 "one warp's " + what + ", the fp32 vector read from global memory as matvec_add reads an unstaged one");
        constant("sm_cols_per_ns", cols_per_ns(1, kInterpreterConsumerWarps),
                 "7 warps' " + what + " each at once, the vector in shared memory: columns of all warps");
    }
    {
        const uint32_t n = scaled(16384, 2), warps = 8;  // 2.1 GFLOP: ~0.3 ms at the datasheet's 7.5 TFLOPS
        const double gflops = median_of(repeats, [&](uint32_t) {
            launch("mma", mma_chains, 1, 32 * warps, 0, n, t, sink.as<float>());
            return double(warps) * 4 * n * (2.0 * 16 * 8 * 16) / double(std::max<uint64_t>(read_u64(t, "mma"), 1));
        });
        constant("sm_tensor_gflops", gflops,
                 fmt::format("8 warps on one SM, 4 independent chains of {} mma.m16n8k16 BF16 (fp32 accumulate) each", n));
    }
    {
        const uint32_t n = scaled(65536, 2), warps = 8;  // 16.8 M warp instructions: ~2 ms at 7.9 a ns
        const double per_ns = median_of(repeats, [&](uint32_t) {
            launch("issue", issue_chains, 1, 32 * warps, 0, n, t, sink.as<float>());
            return double(warps) * 32 * n / double(std::max<uint64_t>(read_u64(t, "issue"), 1));
        });
        constant("sm_issue_per_ns", per_ns,
                 fmt::format("8 warps on one SM, each thread 8 independent chains of {} fp32 multiply-adds: "
                             "warp instructions issued per ns (the loop's own, 2-3 a round of 32, not counted)",
                             4 * n));
    }
    {  // The loader's fill: per SM alone (an observation), and every SM at once (the copy bandwidth the model uses).
        const uint32_t all = scaled(c.sms, std::min<uint32_t>(c.sms, 4)), per_sm_pages = scaled(4096, 4);
        const uint32_t all_pages = scaled((1u << 30) / kPageBytes / all, 4);  // 1 GiB over the grid
        const size_t smem = kFillPages * kPageBytes + kFillPages * 8;
        check(cudaFuncSetAttribute(fill_pages, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "fill smem");
        Buffer src(std::max<size_t>(size_t(per_sm_pages), size_t(all_pages) * all) * kPageBytes, "fill source");
        Buffer starts(all * 8, "fill starts"), ends(all * 8, "fill ends");
        const uint32_t src_pages = std::max(per_sm_pages, all_pages * all);
        auto gbs = [&](uint32_t blocks, uint32_t pages, uint32_t from_pages) {
            return median_of(repeats, [&](uint32_t) {
                launch("page fill", fill_pages, blocks, 32, smem, src.as<const uint8_t>(), from_pages, pages,
                       starts.as<uint64_t>(), ends.as<uint64_t>());
                std::vector<uint64_t> s(blocks), e(blocks);
                check(cudaMemcpy(s.data(), starts.p, blocks * 8, cudaMemcpyDeviceToHost), "fill starts");
                check(cudaMemcpy(e.data(), ends.p, blocks * 8, cudaMemcpyDeviceToHost), "fill ends");
                const uint64_t span = *std::max_element(e.begin(), e.end()) - *std::min_element(s.begin(), s.end());
                return double(blocks) * pages * kPageBytes / double(std::max<uint64_t>(span, 1));
            });
        };
        c.observations.push_back({"sm_fill_gbs", gbs(1, per_sm_pages, src_pages), "GB/s",
                                  fmt::format("one SM alone filling {} 16 KiB pages through a ring of 8 with "
                                              "cp.async.bulk (the loader's copies)", per_sm_pages)});
        // What a prefill chunk's re-reads cost (its activations, <= 16 MiB, read by every row block, and the rows a
        // later token block streams again: device_cost.cpp): every SM filling pages from one 16 MiB buffer that the
        // median's earlier runs left in the 50 MB L2.
        const uint32_t l2_pages = scaled((16u << 20) / kPageBytes, 4);
        constant("l2_gbs", gbs(all, all_pages, std::min(l2_pages, src_pages)),
                 fmt::format("{} SMs at once, each filling {} 16 KiB pages with cp.async.bulk from one {} KiB buffer "
                             "(L2-resident after the first run)",
                             all, all_pages, std::min(l2_pages, src_pages) * kPageBytes / 1024));
        constant("bandwidth_gbs", gbs(all, all_pages, src_pages),
                 fmt::format("{} SMs at once, each filling {} 16 KiB pages of its own share through a ring of 8 with "
                             "cp.async.bulk: bytes over the first start to the last end", all, all_pages));
    }
    return c;
}

MK_CUDA_BACKEND_END
}  // namespace mk

// The memory-model primitives every role uses, in one audited place:
//  - producer: finish the stores (a team barrier, then a device-scope release increment);
//  - consumer: poll the counter (relaxed) until the epoch-relative target is met, then one acquire load,
//    then fence.proxy.async.global so bulk copies issued afterwards see what generic stores wrote;
//  - every wait backs off with __nanosleep, polls the abort flags, and past the watchdog bound
//    writes a fault record and raises the abort flag instead of hanging (never __trap).
#pragma once
#include <cuda/atomic>

#include <cstdint>

#include "instructions/common/ptx.cuh"
#include "runtime/cuda/control.hpp"

namespace mk::cuda_sync {

using ptx::global_timer_ns;

__device__ inline uint64_t acquire_load(const uint64_t* counter) {
    return cuda::atomic_ref<const uint64_t, cuda::thread_scope_device>(*counter).load(cuda::memory_order_acquire);
}
__device__ inline uint32_t acquire_load(const uint32_t* value) {
    return cuda::atomic_ref<const uint32_t, cuda::thread_scope_device>(*value).load(cuda::memory_order_acquire);
}
__device__ inline void release_store(uint32_t* value, uint32_t v) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*value).store(v, cuda::memory_order_release);
}
// Called by one thread after a barrier of the team whose stores it publishes.
__device__ inline void release_add(uint64_t* counter, uint64_t delta) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*counter).fetch_add(delta, cuda::memory_order_release);
}
// Tensor parallel: a counter another rank signals (a transfer's, possibly from another GPU over NVLink) is
// released and acquired at system scope, the scope both GPUs' threads share.
__device__ inline void release_add_system(uint64_t* counter, uint64_t delta) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*counter).fetch_add(delta, cuda::memory_order_release);
}
__device__ inline uint64_t acquire_load_system(const uint64_t* counter) {
    return cuda::atomic_ref<const uint64_t, cuda::thread_scope_system>(*counter).load(cuda::memory_order_acquire);
}
// Generic-proxy writes seen through an acquire become visible to later async-proxy (bulk) reads.
using ptx::fence_proxy_async_global;

// Mapped host memory: system-scope accesses (the host reads and writes it while the kernel runs).
__device__ inline uint32_t system_load(const volatile uint32_t* value) {
    return cuda::atomic_ref<const uint32_t, cuda::thread_scope_system>(*const_cast<const uint32_t*>(value))
        .load(cuda::memory_order_acquire);
}
__device__ inline void system_store(volatile uint32_t* value, uint32_t v) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(value)).store(v, cuda::memory_order_release);
}

// What a waiter needs to stop instead of hanging, and what it reports if it must.
struct WaitGuard {
    DeviceControl* control;
    Mailbox* mailbox;     // null in tests without a host mailbox
    uint64_t bound_ns;    // 0: wait forever (idle waits for the next command)
    uint32_t sm, index, opcode, epoch;
};

__device__ inline bool aborted(const WaitGuard& g) {
    return acquire_load(&g.control->abort) != 0 || (g.mailbox && system_load(&g.mailbox->host_abort) != 0);
}
// The device's abort flag alone, relaxed (after an abort nothing read afterwards matters): what a page wait's
// threads poll, so 224 threads do not each read host memory over PCIe.
__device__ inline bool device_aborted(const WaitGuard& g) {
    return cuda::atomic_ref<const uint32_t, cuda::thread_scope_device>(g.control->abort).load(
               cuda::memory_order_relaxed) != 0;
}

// Writes the fault record once (the first claimant) and raises the abort flag.
__device__ inline void raise_fault(const WaitGuard& g, uint32_t flag, uint32_t counter, uint64_t value, uint64_t target,
                                   uint64_t waited_ns) {
    if (atomicCAS(&g.control->fault_claimed, 0u, 1u) == 0u && g.mailbox) {
        FaultRecord& f = g.mailbox->fault;
        f.sm = g.sm;
        f.index = g.index;
        f.opcode = g.opcode;
        f.counter = counter;
        f.epoch = g.epoch;
        f.value = value;
        f.target = target;
        f.waited_ns = waited_ns;
        __threadfence_system();
        system_store(&f.flag, flag);
    }
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(g.control->abort).store(1u, cuda::memory_order_release);
}

// A wait's poller (the loader, lane 0 of a consumer warp, block 0 at a step's end): the device flag, and the
// host's flag mirrored into it, so the other threads see a host abort on the device.
__device__ inline bool aborted_mirrored(const WaitGuard& g) {
    if (device_aborted(g)) return true;
    if (!g.mailbox || system_load(&g.mailbox->host_abort) == 0) return false;
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(g.control->abort).store(1u, cuda::memory_order_release);
    return true;
}

// Waits until *value >= target, acquiring at system scope when `system` (a counter another rank signals).
// Returns false when the run is aborted (by this wait's watchdog or anyone).
// Polls are relaxed loads (an acquire load invalidates L1 on every poll, a fence.sc costs a MEMBAR.SC); once
// a poll sees the target, one acquire load of the same counter (monotonic: still >= target) is the acquire.
template <typename T>
__device__ inline bool wait_at_least(const T* value, T target, const WaitGuard& g, uint32_t counter_id,
                                     bool system = false) {
    auto load = [&]() -> T {
        if (system) return cuda::atomic_ref<const T, cuda::thread_scope_system>(*value).load(cuda::memory_order_relaxed);
        return cuda::atomic_ref<const T, cuda::thread_scope_device>(*value).load(cuda::memory_order_relaxed);
    };
    auto acquired = [&]() {
        if constexpr (sizeof(T) == sizeof(uint64_t))
            if (system) return acquire_load_system(value) >= target;
        return acquire_load(value) >= target;
    };
    if (load() >= target) return acquired();
    // The back-off doubles from 32 ns to 256: a poll lands up to ~the back-off late, on the critical path of
    // every dependency (the device cost model: a 1024 ns cap cost ~36 us a token of the Llama-3.2-1B shape).
    // One poller per waiting SM at 256 ns is ~0.5 G loads/s over 132 SMs, far below what L2 serves.
    constexpr uint32_t kMaxBackoffNs = 256;
    const uint64_t start = global_timer_ns();
    uint32_t sleep_ns = 32;
    for (uint32_t spin = 1;; ++spin) {
        const T now = load();
        if (now >= target) return acquired();
        __nanosleep(sleep_ns);
        sleep_ns = sleep_ns < kMaxBackoffNs ? sleep_ns * 2 : kMaxBackoffNs;
        if (spin % 16 == 0) {
            if (aborted(g)) {
                if (g.mailbox && system_load(&g.mailbox->host_abort) != 0) raise_fault(g, 2, counter_id, now, target, 0);
                return false;
            }
            const uint64_t waited = global_timer_ns() - start;
            if (g.bound_ns != 0 && waited > g.bound_ns) {
                raise_fault(g, 1, counter_id, uint64_t(now), uint64_t(target), waited);
                return false;
            }
        }
    }
}

}  // namespace mk::cuda_sync

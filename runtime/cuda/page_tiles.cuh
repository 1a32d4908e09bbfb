// Shared-memory pages: each page has a "full" mbarrier (the loader's bulk copy completes it with its
// byte count) and an "empty" mbarrier (the consumers arrive once they no longer read the page). Every
// thread tracks the parity of each page's next phase in a 32-bit mask, so no per-page counters are
// shared between roles. PageTiles is the Tiles an op sees inside the resident kernel.
#pragma once
#include <cstdint>

#include "instructions/device.cuh"
#include "runtime/cuda/page_ring.hpp"
#include "runtime/cuda/sync.cuh"

namespace mk {

__device__ inline uint32_t smem_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ inline void mbarrier_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ inline void mbarrier_arrive(uint64_t* bar) {
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared::cta.b64 state, [%0];\n\t}" ::"r"(smem_address(bar))
                 : "memory");
}
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(
                     smem_address(bar)),
                 "r"(bytes)
                 : "memory");
}
// True once the phase with this parity has completed.
__device__ inline bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
    return done != 0;
}
// A 1-D bulk copy global -> shared that completes `bar`'s transaction count (sm_90 TMA).
__device__ inline void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
}
__device__ inline void prefetch_l2(const void* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

struct Pages {
    uint8_t* base;        // n pages of page_bytes
    uint64_t* full;       // n mbarriers
    uint64_t* empty;      // n mbarriers
    uint32_t page_bytes;
    __device__ uint8_t* page(uint32_t p) const { return base + size_t(p) * page_bytes; }
};

// Waits for a page barrier phase; false when the run was aborted meanwhile.
__device__ inline bool wait_phase(uint64_t* bar, uint32_t parity, const cuda_sync::WaitGuard& guard) {
    for (uint32_t spin = 1; !mbarrier_try_wait(bar, parity); ++spin)
        if (spin % 64 == 0 && cuda_sync::aborted(guard)) return false;
    return true;
}

// The consumers' view of one instruction's tiles: tile t is in the page the ring gives slot t % used.
struct PageTiles {
    Pages pages;                 // by value: no pointer to a local, which would push it to local memory
    const PageRing* ring;        // the consumers' ring (shared memory) for this instruction
    const DeviceTile* tiles;     // this instruction's tiles
    uint32_t n_tiles, used;      // tiles, pages held
    uint32_t full_parity;        // this thread's mask: parity of each page's next fill (copied back by the caller)
    Team team;
    uint64_t* last_arrival;      // trace: when the last tile was seen (rank 0), or null
    cuda_sync::WaitGuard guard;
    bool ok;

    __device__ uint32_t count() const { return n_tiles; }
    __device__ const DeviceTile& info(uint32_t t) const { return tiles[t]; }
    __device__ const uint8_t* acquire(uint32_t t) {
        const uint32_t p = ring->page_of_tile(t, used);
        // After an abort the bytes may never come: ops then compute garbage nobody reads.
        if (ok && !wait_phase(&pages.full[p], (full_parity >> p) & 1u, guard)) ok = false;
        if (last_arrival && team.rank == 0 && t + 1 == n_tiles) *last_arrival = cuda_sync::global_timer_ns();
        return pages.page(p);
    }
    __device__ void release(uint32_t t) {
        const uint32_t p = ring->page_of_tile(t, used);
        full_parity ^= 1u << p;
        team.sync();  // every reader is done with the page
        if (team.rank == 0) mbarrier_arrive(&pages.empty[p]);
    }
};

}  // namespace mk

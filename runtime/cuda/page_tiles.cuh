// Shared-memory pages: each page has a "full" mbarrier (the loader's bulk copy completes it with its
// byte count) and an "empty" mbarrier (each consumer warp arrives once it no longer reads the page). Every
// thread tracks the parity of each page's next phase in a 32-bit mask, so no per-page counters are
// shared between roles. PageTiles is the Tiles an op sees inside the resident kernel.
#pragma once
#include <cstdint>

#include "instructions/device.cuh"
#include "runtime/cuda/page_ring.hpp"
#include "runtime/cuda/sync.cuh"

namespace mk {

// The PTX behind these is in instructions/common/ptx.cuh (the seam the emulator twins).
using ptx::bulk_copy_to_shared;
using ptx::mbarrier_arrive;
using ptx::mbarrier_arrive_expect_tx;
using ptx::mbarrier_init;
using ptx::mbarrier_try_wait;
using ptx::prefetch_l2;

struct Pages {
    uint8_t* base;        // n pages of page_bytes
    uint64_t* full;       // n mbarriers
    uint64_t* empty;      // n mbarriers
    uint32_t page_bytes;
    __device__ uint8_t* page(uint32_t p) const { return base + size_t(p) * page_bytes; }
};

// Waits for a page barrier phase; false when the run was aborted meanwhile. Only the `poller` (the loader,
// lane 0 of a consumer warp) reads the host's abort flag, mirroring it into the device's, which the others poll.
__device__ inline bool wait_phase(uint64_t* bar, uint32_t parity, const cuda_sync::WaitGuard& guard, bool poller) {
    for (uint32_t spin = 1; !mbarrier_try_wait(bar, parity); ++spin)
        if (spin % 64 == 0 && (poller ? cuda_sync::aborted_mirrored(guard)
                                      : cuda_sync::device_aborted(guard)))
            return false;
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
    // Bytes between the rows of tile t in its page: whole rows at the weight's stride, an MMA tile's packed.
    __device__ uint32_t pitch(uint32_t t, uint32_t row_bytes) const {
        return tiles[t].whole_rows() ? row_bytes : tiles[t].piece_bytes();
    }
    __device__ const uint8_t* acquire(uint32_t t) {
        const uint32_t p = ring->page_of_tile(t, used);
        // After an abort the bytes may never come: ops then compute garbage nobody reads.
        // Lane 0 of each warp reads the host's flag: warps wait on pages independently (one may sit at a
        // barrier while another waits), so each waiting warp has a poller.
        if (ok && !wait_phase(&pages.full[p], (full_parity >> p) & 1u, guard, team.lane() == 0)) ok = false;
        if (last_arrival && team.rank == 0 && t + 1 == n_tiles) *last_arrival = cuda_sync::global_timer_ns();
        return pages.page(p);
    }
    // Per warp: the page's "empty" barrier counts one arrival per consumer warp, so a warp done with its rows
    // moves on without waiting for the others (no team barrier per tile).
    __device__ void release(uint32_t t) {
        const uint32_t p = ring->page_of_tile(t, used);
        full_parity ^= 1u << p;
        __syncwarp();  // every lane of this warp is done with the page
        if (team.lane() == 0) mbarrier_arrive(&pages.empty[p]);
    }
};

}  // namespace mk

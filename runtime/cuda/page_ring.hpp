// The controller's page hand-off, shared by the CUDA kernel and its CPU tests: instruction i+1's page
// slot k is the k-th page instruction i freed (in its plan's release order), then the pages i did
// not take, in their previous order — the protocol the CPU's CheckedTileReader runs. Tile t of an
// instruction with n pages lives in slot t % n.
#pragma once
#include <cstdint>

#include "instructions/encoding.hpp"

// Device pass only: nvcc hands the pragma to g++ in its host pass too, which warns (an error under MK_WERROR).
#if defined(__CUDA_ARCH__)
#define MK_PAGE_RING_UNROLL _Pragma("unroll")
#else
#define MK_PAGE_RING_UNROLL
#endif

namespace mk {

struct PageRing {
    static constexpr uint32_t kMaxPages = 32;
    uint8_t hand_out[kMaxPages];  // physical page of the next instruction's slot k
    uint8_t taken[kMaxPages];     // finish()'s copy (a member, so the kernel keeps it in shared memory)
    uint32_t n_pages;

    MK_HOST_DEVICE void reset(uint32_t pages) {
        n_pages = pages;
        for (uint32_t p = 0; p < pages; ++p) hand_out[p] = uint8_t(p);
    }
    // The physical page of tile t for an instruction holding `used` pages (before finish()).
    MK_HOST_DEVICE uint32_t page_of_tile(uint32_t t, uint32_t used) const { return hand_out[t % used]; }
    // The instruction that held the first `used` slots freed them in `order` (slot ids, packed by
    // pack_release_order: the kernel loads them in two 16-byte loads, not a dependent byte load per slot).
    // Unrolled so the words stay in registers.
    MK_HOST_DEVICE void finish(const uint32_t (&order)[kMaxPages / 4], uint32_t used) {
        MK_PAGE_RING_UNROLL
        for (uint32_t k = 0; k < kMaxPages; ++k)
            if (k < used) taken[k] = hand_out[k];
        MK_PAGE_RING_UNROLL
        for (uint32_t k = 0; k < kMaxPages; ++k)
            if (k < used) hand_out[k] = taken[order[k / 4] >> (8 * (k % 4)) & 0xffu];
    }
};

// An instruction's release order (`used` slot ids) packed four slots a word, low byte first.
inline void pack_release_order(const uint8_t* slots, uint32_t used, uint32_t (&order)[PageRing::kMaxPages / 4]) {
    for (uint32_t w = 0; w < PageRing::kMaxPages / 4; ++w) order[w] = 0;
    for (uint32_t k = 0; k < used && k < PageRing::kMaxPages; ++k) order[k / 4] |= uint32_t(slots[k]) << (8 * (k % 4));
}

}  // namespace mk

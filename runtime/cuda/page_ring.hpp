// The controller's page hand-off, shared by the CUDA kernel and its CPU tests: instruction i+1's page
// slot k is the k-th page instruction i freed (in its plan's release order), then the pages i did
// not take, in their previous order — the protocol the CPU's CheckedTileReader runs. Tile t of an
// instruction with n pages lives in slot t % n.
#pragma once
#include <cstdint>

#include "instructions/encoding.hpp"

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
    // The instruction that held the first `used` slots freed them in `release_order` (slot ids).
    MK_HOST_DEVICE void finish(const uint8_t* release_order, uint32_t used) {
        for (uint32_t k = 0; k < used; ++k) taken[k] = hand_out[k];
        for (uint32_t k = 0; k < used; ++k) hand_out[k] = taken[release_order[k]];
    }
};

}  // namespace mk

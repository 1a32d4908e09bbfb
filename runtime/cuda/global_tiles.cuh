// The Tiles of the kernel-per-op baseline: every tile is read in place from the weight blob in
// global memory, so acquiring waits for nothing and releasing frees nothing.
#pragma once
#include <cstdint>

#include "instructions/device.cuh"

namespace mk {

struct GlobalTiles {
    const DeviceTile* tiles;  // this instruction's tiles, in page-plan order
    uint32_t n_tiles;
    const uint8_t* weight_blob;

    __device__ GlobalTiles(const DeviceTile* tiles_, uint32_t count, const uint8_t* blob)
        : tiles(tiles_), n_tiles(count), weight_blob(blob) {}
    __device__ uint32_t count() const { return n_tiles; }
    __device__ const DeviceTile& info(uint32_t t) const { return tiles[t]; }
    // In place, every tile's rows are the weight's row stride apart.
    __device__ uint32_t pitch(uint32_t, uint32_t row_bytes) const { return row_bytes; }
    __device__ const uint8_t* acquire(uint32_t t) { return weight_blob + tiles[t].src_offset; }
    __device__ void release(uint32_t) {}
};

}  // namespace mk

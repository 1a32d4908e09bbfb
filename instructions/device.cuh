// What an op's CUDA implementation sees: the same memory as the CPU OpContext (arena, weights, KV
// caches, the step's token and position) in device pointers, the team of threads that computes it,
// and its weight tiles. Each op's folder holds `<op>.cuh` with
//     struct <Pascal>Device { template <class Tiles> static __device__ void run(const Instruction&,
//                                                                          const DeviceOpContext&,
//                                                                          const Team&, Tiles&); };
// which the resident interpreter (tiles in shared-memory pages) and the kernel-per-op baseline
// (tiles read in place from global memory) both call.
#pragma once
#include "instructions/device_types.hpp"

#if defined(__CUDACC__) || defined(MK_CUDA_EMU)
#include "instructions/common/ptx.cuh"
#endif

namespace mk {

#if defined(__CUDACC__) || defined(MK_CUDA_EMU)
// The threads that run an op: `size` threads (whole warps) ranked 0..size-1, synchronized by a named
// barrier so the loader warp of the resident kernel is never part of it.
struct Team {
    uint32_t rank;
    uint32_t size;
    uint32_t barrier_id;  // 1..15 (0 is __syncthreads)
    __device__ void sync(MK_WHERE_ONLY) const { ptx::bar_sync(barrier_id, size MK_WHERE_ARG); }
    __device__ uint32_t warp() const { return rank / 32; }
    __device__ uint32_t lane() const { return rank % 32; }
    __device__ uint32_t n_warps() const { return size / 32; }
};

// The Tiles concept an op is written against (both implementations are in runtime/cuda/):
//   __device__ uint32_t count() const;                 tiles of this instruction's page plan
//   __device__ const DeviceTile& info(uint32_t t) const;
//   __device__ const uint8_t* acquire(uint32_t t);     every team thread calls it; returns when the
//                                                      tile's bytes are visible to the team
//   __device__ void release(uint32_t t);               every team thread calls it once it no longer
//                                                      reads the tile (its page may be refilled)
//   __device__ uint32_t pitch(uint32_t t, uint32_t row_bytes) const;  bytes between tile t's rows as acquired
//                                                      (row_bytes: its weight's stride in the blob)
// Tiles are acquired and released in increasing order.
#endif

}  // namespace mk

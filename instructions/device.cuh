// What an op's CUDA implementation sees: the same memory as the CPU OpContext (arena, weights, KV
// caches, the step's token and position) in device pointers, the team of threads that computes it,
// and its weight tiles. Each op's folder holds `<op>.cuh` with
//     struct <Pascal>Device { template <class Tiles> static __device__ void run(const Instruction&,
//                                                                          const DeviceOpContext&,
//                                                                          const Team&, Tiles&); };
// which the resident interpreter (tiles in shared-memory pages) and the kernel-per-op baseline
// (tiles read in place from global memory) both call.
#pragma once
#include <cstdint>

#include "instructions/encoding.hpp"
#include "instructions/op_types.hpp"

#if defined(__CUDACC__) || defined(MK_CUDA_EMU)
#include "instructions/common/ptx.cuh"
#endif

namespace mk {

// One weight as the device holds it: rows padded to kDeviceRowAlign (16) bytes (repacked at
// load) so every tile is a legal bulk copy; vectors (norms, biases) are F32.
struct DeviceWeight {
    const uint8_t* data;
    uint32_t dtype;      // a DType value
    uint32_t rows, cols;
    uint32_t row_bytes;  // padded row stride
};

// One tile of an instruction's page plan, as uploaded: where its bytes come from and what they hold.
struct DeviceTile {
    uint64_t src_offset;  // byte offset into the weight blob (16-byte aligned)
    uint32_t bytes;       // a multiple of 16
    uint32_t weight;      // weight id
    uint32_t row_begin;
    uint32_t n_rows;
};
static_assert(sizeof(DeviceTile) == 24);

// One tensor-parallel rank's memory as every rank addresses it. The schedule's arena offsets, KV layers and
// counter ids are global over the combined schedule, so the arena and cache bases are biased by the rank's
// first byte and layer (arena - rank * rank_arena_bytes): the same offset indexes the same buffer on any
// rank. Each rank holds a whole counter array and uses the counters it owns (verify's rank check). When all
// ranks share one allocation (the CPU, the kernel-per-op baseline) every entry holds the same bases.
struct RankMemory {
    uint8_t* arena;
    float* k_cache;
    float* v_cache;
    uint64_t* counters;
};

// A rank's base as RankMemory (and the CPU's OpContext::rank_arenas) hold it: `own`, its allocation, less
// `region_start` bytes (where its region begins in the combined layout). Integer arithmetic: the biased
// address is never dereferenced below `own`.
template <typename T>
inline T* rank_biased(T* own, uint64_t region_start) {
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(own) - uintptr_t(region_start));
}

struct DeviceOpContext {
    ModelDims dims;
    const float* rope_inv_freq;    // (head_dim / 2) fp32
    uint8_t* arena;                // activation buffers, byte offsets from the args (this rank's)
    const RankMemory* ranks;       // device: by rank; where a transfer writes (on another GPU, over NVLink)
    const DeviceWeight* weights;   // by weight id
    float* k_cache;                // (n_layers, n_kv_heads, ctx_len, head_dim) fp32
    float* v_cache;
    uint32_t ctx_len;
    int32_t pos;                   // the step's position
    int32_t token;                 // the step's input token
    float* scratch;                // team-private shared memory
    uint32_t scratch_floats;

#if defined(__CUDACC__) || defined(MK_CUDA_EMU)
    __device__ float* f32(uint32_t byte_offset) const { return reinterpret_cast<float*>(arena + byte_offset); }
    __device__ uint64_t cache_offset(uint32_t layer, uint32_t kv_head) const {
        return (uint64_t(layer) * dims.n_kv_heads + kv_head) * ctx_len * dims.head_dim;
    }
#endif
};

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
// Tiles are acquired and released in increasing order.
#endif

}  // namespace mk

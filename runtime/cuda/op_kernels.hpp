// The kernel-per-op baseline (host side): one launch runs a batch of independent instructions, one
// block each, with their tiles read in place from global memory. The reference the resident
// interpreter is measured and checked against.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instructions/device_types.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// Per-block thread limit: the launch bounds let the kernel (every op inlined) keep 255 registers.
inline constexpr uint32_t kBatchMaxThreads = 256;

struct BatchLaunch {
    const Instruction* instructions;  // device: the batch's `count` records
    const uint32_t* tile_begin;       // device: count + 1 indices into tiles, for those records
    const DeviceTile* tiles;          // device
    const uint8_t* weight_blob;       // device: what DeviceTile::src_offset counts from
    DeviceOpContext ctx;              // pos, token, n_tokens, scratch and scratch_floats are set by the launch
    const int32_t* step_state;        // device: {pos, token, n_tokens} of the step (read at run time: graph replays)
    uint32_t count;                   // instructions in the batch: one block each
    uint32_t threads;                 // per block: whole warps, at most kBatchMaxThreads
    uint32_t scratch_bytes;           // dynamic shared memory per block (at least 4 * (d_model + 1024))
    bool programmatic = false;        // programmatic dependent launch: the prologue overlaps the previous kernel
};

// Enqueues the batch on `stream`; returns the launch's error (cudaSuccess when queued).
cudaError_t launch_instruction_batch(const BatchLaunch& launch, cudaStream_t stream);

MK_CUDA_BACKEND_END
}  // namespace mk

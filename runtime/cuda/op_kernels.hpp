// The kernel-per-op baseline (host side): one launch runs a batch of independent records of one op, one
// block each, with their tiles read in place from global memory. The reference the resident
// interpreter is measured and checked against.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instructions/device_types.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// Per-block thread limit (each op's kernel is compiled for it: up to 255 registers where the op needs them).
inline constexpr uint32_t kBatchMaxThreads = 256;

struct BatchLaunch {
    uint32_t opcode = UINT32_MAX;     // every record's op (the caller's to keep true): picks the op's kernel; unset:
                                      // the launch fails (cudaErrorInvalidValue) rather than run another op's code
    const Instruction* instructions;  // device: the batch's `count` records
    const uint32_t* tile_begin;       // device: count + 1 indices into tiles, for those records
    const DeviceTile* tiles;          // device
    const uint8_t* weight_blob;       // device: what DeviceTile::src_offset counts from
    DeviceOpContext ctx;              // pos, token, n_tokens, scratch and scratch_floats are set by the launch
    const int32_t* step_state;        // device: {pos, token, n_tokens} of the step (read at run time: graph replays)
    uint32_t count;                   // instructions in the batch: one block each
    uint32_t threads;                 // per block: whole warps, at most kBatchMaxThreads
    uint32_t scratch_bytes;           // dynamic shared memory per block (at least op_scratch_bytes)
    bool programmatic = false;        // programmatic dependent launch: the prologue overlaps the previous kernel
};

// How the baseline launches an op stage, chosen per op from its shape as a kernel-per-op implementation tuned
// for batch-1 decode would be, instead of the megakernel's split (one record per SM) with one fixed block. A
// record's tiles are dealt to several blocks only where the op takes its rows from its tiles alone (matvec_add;
// rms_gate_up in whole gate/up pairs); the other ops' records carry row ranges (rms_qkv's RoPE), a chunk of
// positions (attention) or a reduction slot (the LM head's argmax), so they run one block per record.
struct StageShape {
    uint32_t threads;          // per block: whole warps, at most kBatchMaxThreads
    uint32_t tiles_per_block;  // tiles of a record per block; 0: the record's tiles in one block
};

// The shape of a stage whose first record is `first` (its first tile, or null), for a KV cache of ctx_len positions.
StageShape stage_shape(const Instruction& first, const DeviceTile* first_tile, uint32_t ctx_len);

// Enqueues the batch on `stream`; returns the launch's error (cudaSuccess when queued).
cudaError_t launch_instruction_batch(const BatchLaunch& launch, cudaStream_t stream);

MK_CUDA_BACKEND_END
}  // namespace mk

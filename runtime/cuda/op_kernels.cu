// The kernel-per-op baseline: one kernel per op (run_op_batch<OpDevice>: only that op's code, so each
// kernel gets the registers its op needs, as separately written kernels would; one kernel inlining every op
// took 196). ptxas at sm_90a: embed 24, attn_reduce 40, attn_partial 130, matvec_add 170, rms_gate_up 144,
// rms_qkv 165, rms_lm_head 161, sample 18, no spills. Bounds of (256, 1): with (256, 2) ptxas caps them at 128
// and spills 12-28 bytes in rms_qkv, rms_gate_up and rms_lm_head (every weight format is inlined into the
// matvecs). Block b runs record b of the batch with all its threads as one team (named barrier 1), its tiles
// read in place from the weight blob.
//
// Programmatic dependent launch, and why releasing the next kernel first thing is sound. Every block runs
// griddepcontrol.launch_dependents before any write of its own, so the stream's next kernel may start while
// this one has barely begun. That is allowed because the release promises nothing about memory: the
// dependent's griddepcontrol.wait returns only once this whole grid has completed and its writes are visible
// (PTX ISA, griddepcontrol), wherever the release sat. So the rule each kernel here keeps is: before its
// wait, read only what no kernel writes (the instruction records, the tile table, the weights: uploaded once)
// and write nothing; after it, everything. Reads of activations, the KV cache and the step state wait (no
// read-after-write race), and no write can land under a kernel that still reads its buffer (no
// write-after-read race). The order is transitive: a kernel completes only after its own wait returned, so
// the wait in kernel k covers kernels 0..k-1. A step's first kernel is launched without the attribute (it
// follows the host's copy of the step state), where the wait is a no-op.
#include "runtime/cuda/op_kernels.hpp"

#include "instructions/all_ops.cuh"
#include "runtime/cuda/global_tiles.cuh"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// The prefill rows ops' MMA passes are sized for 7 warps (token_rows.hpp): a block must bring at least that many.
static_assert(kBatchMaxThreads / 32 >= kMmaTeamWarps);
template <class OpDevice>
__global__ void __launch_bounds__(kBatchMaxThreads, 1)
    run_op_batch(const Instruction* instructions, const uint32_t* tile_begin, const DeviceTile* tiles,
                          const uint8_t* weight_blob, const int32_t* step_state, DeviceOpContext ctx) {
    MK_DYNAMIC_SHARED(float4, scratch, 16);  // float4: 16-byte aligned for row_dot's vector loads
    ctx.scratch = reinterpret_cast<float*>(scratch);
    const uint32_t b = blockIdx.x;
    const Team team{threadIdx.x, blockDim.x, 1};
    GlobalTiles block_tiles(tiles + tile_begin[b], tile_begin[b + 1] - tile_begin[b], weight_blob);
    // Prologue: the weights do not depend on the step, so they stream into L2 before the wait (a warp's lanes
    // a tile each; tiles are 16-byte aligned multiples of 16 bytes).
    if (threadIdx.x < 32)
        for (uint32_t t = threadIdx.x; t < block_tiles.count(); t += 32) {
            const DeviceTile& tile = block_tiles.info(t);
            for_each_tile_piece(tile, ctx.weights[tile.weight].row_bytes, [&](uint64_t src, uint32_t, uint32_t bytes) {
                ptx::prefetch_l2(weight_blob + src, bytes);
            });
        }
    ptx::griddep_launch_dependents();  // before any write: sound only with the wait below (see the top)
    ptx::griddep_wait();  // every earlier kernel has completed; its writes are visible
    ctx.pos = step_state[0];
    ctx.token = step_state[1];
    ctx.n_tokens = step_state[2];
    OpDevice::run(instructions[b], ctx, team, block_tiles);
}

namespace {
using BatchKernel = void (*)(const Instruction*, const uint32_t*, const DeviceTile*, const uint8_t*, const int32_t*,
                             DeviceOpContext);
BatchKernel batch_kernel(uint32_t opcode) {
    switch (Opcode(opcode)) {
#define MK_OP(snake, Pascal) \
    case Opcode::snake:      \
        return run_op_batch<Pascal##Device>;
#define MK_HOST_OP(snake, Pascal)
#include "instructions/ops.def"
#undef MK_HOST_OP
#undef MK_OP
    default:
        return nullptr;
    }
}
}  // namespace

cudaError_t launch_instruction_batch(const BatchLaunch& launch, cudaStream_t stream) {
    if (launch.count == 0) return cudaSuccess;
    if (launch.threads == 0 || launch.threads % 32 || launch.threads > kBatchMaxThreads) return cudaErrorInvalidValue;
    const BatchKernel kernel = batch_kernel(launch.opcode);
    if (!kernel) return cudaErrorInvalidValue;
    if (launch.scratch_bytes > 48 * 1024) {  // past the default, the kernel must opt in
        const cudaError_t status =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(launch.scratch_bytes));
        if (status != cudaSuccess) return status;
    }
    DeviceOpContext ctx = launch.ctx;
    ctx.scratch = nullptr;
    ctx.scratch_floats = launch.scratch_bytes / 4;
    const Instruction* instructions = launch.instructions;
    const uint32_t* tile_begin = launch.tile_begin;
    const DeviceTile* tiles = launch.tiles;
    const uint8_t* weight_blob = launch.weight_blob;
    const int32_t* step_state = launch.step_state;
    if (launch.programmatic) {
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        // Positional: grid, block, dynamic shared memory, stream, attributes (the emulator's gridDim is a macro).
        cudaLaunchConfig_t config{dim3(launch.count), dim3(launch.threads), launch.scratch_bytes, stream, attribute, 1};
        return cudaLaunchKernelEx(&config, kernel, instructions, tile_begin, tiles, weight_blob,
                                  step_state, ctx);
    }
    void* args[] = {&instructions, &tile_begin, &tiles, &weight_blob, &step_state, &ctx};
    return cudaLaunchKernel(kernel, dim3(launch.count), dim3(launch.threads), args, launch.scratch_bytes,
                            stream);
}

MK_CUDA_BACKEND_END
}  // namespace mk

// The kernel-per-op baseline: block b runs instruction b of the batch with all its threads as one
// team (named barrier 1), its tiles read in place from the weight blob.
#include "runtime/cuda/op_kernels.hpp"

#include "instructions/all_ops.cuh"
#include "runtime/cuda/global_tiles.cuh"

namespace mk {
MK_CUDA_BACKEND_BEGIN

__global__ void __launch_bounds__(kBatchMaxThreads, 1)
    run_instruction_batch(const Instruction* instructions, const uint32_t* tile_begin, const DeviceTile* tiles,
                          const uint8_t* weight_blob, const int32_t* step_state, DeviceOpContext ctx) {
    MK_DYNAMIC_SHARED(float4, scratch, 16);  // float4: 16-byte aligned for row_dot's vector loads
    ctx.scratch = reinterpret_cast<float*>(scratch);
    ctx.pos = step_state[0];
    ctx.token = step_state[1];
    ctx.n_tokens = step_state[2];
    const uint32_t b = blockIdx.x;
    const Team team{threadIdx.x, blockDim.x, 1};
    GlobalTiles block_tiles(tiles + tile_begin[b], tile_begin[b + 1] - tile_begin[b], weight_blob);
    run_device_op(instructions[b], ctx, team, block_tiles);
}

cudaError_t launch_instruction_batch(const BatchLaunch& launch, cudaStream_t stream) {
    if (launch.count == 0) return cudaSuccess;
    if (launch.threads == 0 || launch.threads % 32 || launch.threads > kBatchMaxThreads) return cudaErrorInvalidValue;
    if (launch.scratch_bytes > 48 * 1024) {  // past the default, the kernel must opt in
        const cudaError_t status = cudaFuncSetAttribute(
            run_instruction_batch, cudaFuncAttributeMaxDynamicSharedMemorySize, int(launch.scratch_bytes));
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
    void* args[] = {&instructions, &tile_begin, &tiles, &weight_blob, &step_state, &ctx};
    return cudaLaunchKernel(run_instruction_batch, dim3(launch.count), dim3(launch.threads), args, launch.scratch_bytes,
                            stream);
}

MK_CUDA_BACKEND_END
}  // namespace mk

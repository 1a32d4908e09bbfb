// One warp's tensor-core MMA (mma.m16n8k16 through the PTX seam) on the device, for the [cuda][ops] test that checks
// the hardware (mk_cuda_tests) and the emulator's twin (mk_cuda_emu_tests) against a float64 matmul.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mk {
MK_CUDA_BACKEND_BEGIN

// D = A * B + C with A (16, 16) and B (16, 8) (k by n) 16-bit patterns, bf16 or f16, row major; C and D (16, 8) fp32
// row major; all device pointers. Each lane places its fragments by the PTX ISA's formulas. Waits for the result.
cudaError_t run_mma_tile(const uint16_t* a, const uint16_t* b, const float* c, float* d, bool f16);

MK_CUDA_BACKEND_END
}  // namespace mk

// One warp's mma.m16n8k16 through the PTX seam (mma_probe.hpp): the fragments placed by the PTX ISA's formulas
// ("Matrix Fragments for mma.m16n8k16 with floating point type"), g = lane / 4, t = lane % 4.
#include "runtime/cuda/mma_probe.hpp"

#include "instructions/common/ptx.cuh"

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

__global__ void mma_tile(const uint16_t* a, const uint16_t* b, const float* c, float* d, uint32_t f16) {
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    auto pair = [](uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; };
    auto a_at = [&](uint32_t row, uint32_t col) { return pair(a[row * 16 + col], a[row * 16 + col + 1]); };
    auto b_at = [&](uint32_t k, uint32_t n) { return pair(b[k * 8 + n], b[(k + 1) * 8 + n]); };
    const uint32_t fa[4] = {a_at(g, 2 * t), a_at(g + 8, 2 * t), a_at(g, 2 * t + 8), a_at(g + 8, 2 * t + 8)};
    const uint32_t fb[2] = {b_at(2 * t, g), b_at(2 * t + 8, g)};
    const uint32_t at[4] = {g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1};
    const float fc[4] = {c[at[0]], c[at[1]], c[at[2]], c[at[3]]};
    float fd[4];
    if (f16) ptx::mma_m16n8k16_f16(fd, fa, fb, fc);
    else ptx::mma_m16n8k16_bf16(fd, fa, fb, fc);
    for (uint32_t i = 0; i < 4; ++i) d[at[i]] = fd[i];
}

}  // namespace

cudaError_t run_mma_tile(const uint16_t* a, const uint16_t* b, const float* c, float* d, bool f16) {
    uint32_t is_f16 = f16;
    void* args[] = {&a, &b, &c, &d, &is_f16};
    const cudaError_t status = cudaLaunchKernel(mma_tile, dim3(1), dim3(32), args, 0, nullptr);
    return status != cudaSuccess ? status : cudaDeviceSynchronize();
}

MK_CUDA_BACKEND_END
}  // namespace mk

// The CUDA backend's host-visible names live in an inline namespace that says which device they were
// compiled for: the real one (nvcc) or the CUDA emulator (g++ with MK_CUDA_EMU, runtime/emu). Both
// builds of the same sources can then link into one binary (`--backend cuda` beside `cuda-emu`).
#pragma once

#if defined(MK_CUDA_EMU)
#define MK_CUDA_BACKEND_BEGIN inline namespace cuda_emu {
#else
#define MK_CUDA_BACKEND_BEGIN inline namespace cuda_device {
#endif
#define MK_CUDA_BACKEND_END }

// The device cost model's constants measured on the device by micro-kernels, each doing what the resident
// interpreter does where it incurs the cost (scheduler/device_cost.hpp names them). Built for the device (nvcc)
// and for the CUDA emulator, where the same kernels run with small counts and the result says "emulated".
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include "scheduler/device_calibration.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// Runs every micro-kernel on device 0 (each timed with the global timer over a loop, the median of several
// launches) and returns the constants and observations. Throws mk::Error naming the step whose CUDA call failed.
Calibration run_calibration();

MK_CUDA_BACKEND_END
}  // namespace mk

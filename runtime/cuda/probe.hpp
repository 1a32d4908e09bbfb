// Host-side view of the CUDA device, safe to call on machines with no GPU driver.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cstddef>
#include <string>
#include <vector>

namespace mk::cuda {
MK_CUDA_BACKEND_BEGIN

struct DeviceProbe {
    bool available = false;
    bool kernel_ran = false;  // a one-thread kernel ran and its result came back
    std::string name;
    int sm_count = 0;
    size_t smem_optin_bytes = 0;
    std::string message;
    int device_count = 0;
    // Pairs of GPUs that cannot run tensor-parallel ranks together (no peer access, or no peer atomics), as
    // "0-1 (no peer access)"; empty when every pair can (or there is one GPU).
    std::vector<std::string> unpaired;
};

DeviceProbe probe_device();

MK_CUDA_BACKEND_END
}  // namespace mk::cuda

// Host-side view of the CUDA device, safe to call on machines with no GPU driver.
#pragma once
#include <cstddef>
#include <string>

namespace mk::cuda {

struct DeviceProbe {
    bool available = false;
    bool kernel_ran = false;  // a one-thread kernel ran and its result came back
    std::string name;
    int sm_count = 0;
    size_t smem_optin_bytes = 0;
    std::string message;
};

DeviceProbe probe_device();

}  // namespace mk::cuda

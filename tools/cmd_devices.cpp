// mk devices: which backends this build has and what the CUDA runtime sees (works with no GPU driver).
#include <fmt/core.h>

#include <thread>

#include "tools/commands.hpp"
#if MK_HAVE_CUDA
#include "runtime/cuda/nccl_library.hpp"
#include "runtime/cuda/probe.hpp"
#endif

namespace mk::tools {

void register_devices(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("devices", "List the backends of this build and the GPU the CUDA runtime sees");
    cmd->callback([] {
        fmt::print("cpu: {} hardware threads\n", std::thread::hardware_concurrency());
#if MK_HAVE_CUDA
        cuda::DeviceProbe probe = cuda::probe_device();
        if (!probe.available)
            fmt::print("cuda: built for sm_90a; no usable device ({})\n", probe.message);
        else
            fmt::print("cuda: {} with {} SMs, {} bytes of opt-in shared memory per block; test kernel {}\n",
                       probe.name, probe.sm_count, probe.smem_optin_bytes, probe.kernel_ran ? "ran" : "did not run");
        // Tensor parallel across GPUs would load NCCL; --tp-loopback and the CPU emulation never do.
        const cuda::NcclStatus nccl = cuda::probe_nccl();
        fmt::print("nccl: {}{}\n", nccl.usable ? "" : "not usable: ", nccl.message);
#else
        fmt::print("cuda: not built (configure with -DMK_CUDA=ON and nvcc on the path)\n");
#endif
    });
}

}  // namespace mk::tools

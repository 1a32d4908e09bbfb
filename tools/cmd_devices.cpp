// mk devices: which backends this build has and what the CUDA runtime sees (works with no GPU driver).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <thread>

#include "tools/commands.hpp"
#if MK_HAVE_CUDA
#include "runtime/cuda/nccl_library.hpp"
#include "runtime/cuda/probe.hpp"
#endif

namespace mk::tools {

void register_devices(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "devices", "List the backends of this build, the GPUs the CUDA runtime sees and whether --tp can span them");
    cmd->callback([] {
        fmt::print("cpu: {} hardware threads\n", std::thread::hardware_concurrency());
#if MK_HAVE_CUDA
        cuda::DeviceProbe probe = cuda::probe_device();
        if (!probe.available)
            fmt::print("cuda: built for sm_90a; no usable device ({})\n", probe.message);
        else
            fmt::print("cuda: {} with {} SMs, {} bytes of opt-in shared memory per block; test kernel {}\n",
                       probe.name, probe.sm_count, probe.smem_optin_bytes, probe.kernel_ran ? "ran" : "did not run");
        // Tensor parallel across GPUs loads NCCL (else it uses CUDA peer access); --tp-loopback and the CPU
        // emulation never do.
        if (probe.available && probe.device_count < 2)
            fmt::print("tp: 1 GPU: --backend cuda runs tensor-parallel ranks as --tp-loopback N\n");
        else if (probe.available && probe.unpaired.empty())
            fmt::print("tp: {} GPUs, every pair with peer access and atomics: --backend cuda --tp N (N <= {})\n",
                       probe.device_count, probe.device_count);
        else if (probe.available)
            fmt::print("tp: {} GPUs; pairs that cannot exchange in-kernel: {}\n", probe.device_count,
                       fmt::join(probe.unpaired, ", "));
        const cuda::NcclStatus nccl = cuda::probe_nccl();
        fmt::print("nccl: {}{}\n", nccl.usable ? "" : "not usable (--tp on separate GPUs uses CUDA peer access): ",
                   nccl.message);
#else
        fmt::print("cuda: not built (configure with -DMK_CUDA=ON and nvcc on the path)\n");
#endif
    });
}

}  // namespace mk::tools

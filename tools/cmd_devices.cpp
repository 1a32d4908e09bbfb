// mk devices: which backends this build has and what the CUDA runtime sees (works with no GPU driver).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <fstream>
#include <thread>

#include "models/error.hpp"
#include "runtime/emu/emu_program.hpp"
#include "scheduler/device_calibration.hpp"
#include "tools/commands.hpp"
#if MK_HAVE_CUDA
#include "runtime/cuda/calibrate.hpp"
#include "runtime/cuda/nccl_library.hpp"
#include "runtime/cuda/probe.hpp"
#endif

namespace mk::tools {

namespace {

// --calibrate FILE: the micro-kernels on the GPU (or the emulator), their constants written for --calibration.
void calibrate(const std::string& path, const std::string& backend) {
    Calibration c;
    if (backend == "cuda-emu") {
        c = run_emulated_calibration();
    } else {
#if MK_HAVE_CUDA
        c = run_calibration();
#else
        fail("--calibrate --backend cuda: this mk was built without CUDA; use --backend cuda-emu");
#endif
    }
    std::ofstream out(path);
    out << calibration_to_json(c);
    if (!out) fail("--calibrate {}: cannot write", path);
    fmt::print("calibration of {} ({} SMs{}) written to {}:\n", c.device, c.sms,
               c.emulated ? ", emulated: the values time the emulator" : "", path);
    for (const CalibratedValue& v : c.constants) fmt::print("  {:<22} {:>12.4g} {}\n", v.key, v.value, v.unit);
    for (const CalibratedValue& v : c.observations)
        fmt::print("  {:<22} {:>12.4g} {} (observed)\n", v.key, v.value, v.unit);
}

}  // namespace

void register_devices(CLI::App& app) {
    struct Options {
        std::string calibrate, backend = "cuda";
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "devices", "List the backends of this build, the GPUs the CUDA runtime sees and whether --tp can span them");
    CLI::Option* calibrate_option = cmd->add_option("--calibrate", o->calibrate,
                    "Measure the device cost model's constants with micro-kernels and write them to this JSON file "
                    "(for mk inspect/schedule --calibration)");
    cmd->add_option("--backend", o->backend,
                    "With --calibrate: cuda (the GPU) | cuda-emu (the same kernels on the CUDA emulator: the file says "
                    "\"emulated\" and its values time the emulator)")
        ->check(CLI::IsMember({"cuda", "cuda-emu"}))
        ->needs(calibrate_option);
    cmd->callback([o] {
        if (!o->calibrate.empty()) return calibrate(o->calibrate, o->backend);
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

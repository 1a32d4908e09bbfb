// `--backend cuda-emu` (see emu_program.hpp): the emulated build of the CUDA backend's Programs.
#include "runtime/emu/emu_program.hpp"

#include <fmt/format.h>
#include <mk_emu/emulator.hpp>

#include "models/error.hpp"
#include "runtime/cuda/calibrate.hpp"
#include "runtime/cuda/cuda_program.hpp"

namespace mk {

std::unique_ptr<Program> make_cuda_emu_program(const Model& model, Schedule schedule, const CudaEmuOptions& options,
                                               std::optional<Schedule> prefill) {
    fmt::print(stderr, "mk: {} runs the CUDA device code in the emulator on the CPU ({} SMs, every device thread a "
                       "fiber): slow, for checking without a GPU\n",
               options.kernels ? "cuda-kernels-emu" : "cuda-emu", schedule.streams.size());
    if (options.kernels) {
        CudaKernelsOptions ko;
        ko.ctx_len = options.ctx_len;
        ko.graph = options.graph;
        return make_cuda_kernels_program(model, std::move(schedule), ko, std::move(prefill));
    }
    if (options.separate_gpus && mk_emu::config().n_devices < schedule.tp_size) {
        mk_emu::Config c = mk_emu::config();
        c.n_devices = schedule.tp_size;
        mk_emu::configure(c);
    }
    CudaProgramOptions co;
    co.ctx_len = options.ctx_len;
    co.stepwise = options.stepwise;
    co.separate_gpus = options.separate_gpus;
    co.watchdog_ms = options.watchdog_ms;
    co.trace_file = options.trace_file;
    return make_cuda_program(model, std::move(schedule), co, std::move(prefill));
}

Calibration run_emulated_calibration() { return run_calibration(); }

}  // namespace mk

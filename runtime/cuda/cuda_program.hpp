// The CUDA backends as Programs: the resident megakernel (one launch for the Program's life, or one
// launch per step with `stepwise`; one kernel per GPU when tensor-parallel ranks run on separate GPUs)
// and the kernel-per-op baseline (`cuda-kernels`, optionally replayed
// as a CUDA graph). Built only with CUDA; the host logic they share is in upload_layout and control.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/program.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

struct CudaProgramOptions {
    uint32_t ctx_len = 0;          // 0: default_ctx_len (runtime/program.hpp)
    bool stepwise = false;         // one launch per step instead of a resident kernel
    bool separate_gpus = false;    // a TP schedule: rank r on GPU r (else every rank on this GPU: --tp-loopback)
    uint32_t watchdog_ms = 2000;   // a wait longer than this aborts the kernel with a fault report
    std::string trace_file;        // write a Chrome trace of the first trace_steps steps when the program ends
    uint32_t trace_steps = 64;
};

// The megakernel Program; unless stepwise, its resident kernel runs whole generations (run_generation).
// One resident megakernel per device: a second one, or any launch on a device that runs one, is refused
// with an mk::Error naming it (it could never start). Throws mk::Error when there is no usable device,
// or the schedule, model or context do not fit it. `prefill`, when given, is a prefill schedule
// (compile_prefill_schedule, same model, target and weight formats; one GPU, no tensor parallelism): the program's
// prefill() runs it over the same uploaded weights and KV cache.
std::unique_ptr<Program> make_cuda_program(const Model& model, Schedule schedule, const CudaProgramOptions& options,
                                           std::optional<Schedule> prefill = std::nullopt);

struct CudaKernelsOptions {
    uint32_t ctx_len = 0;
    uint32_t watchdog_ms = 2000;  // a step not done in 4x this + 10 s is reported (the kernels cannot be aborted)
    bool graph = false;  // capture each step's launches once and replay them as a CUDA graph
};
std::unique_ptr<Program> make_cuda_kernels_program(const Model& model, Schedule schedule,
                                                   const CudaKernelsOptions& options,
                                                   std::optional<Schedule> prefill = std::nullopt);

MK_CUDA_BACKEND_END
}  // namespace mk

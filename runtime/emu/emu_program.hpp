// `--backend cuda-emu`: the CUDA backend's resident megakernel (the same sources) run by the CUDA
// emulator on the CPU, on an emulated device of the schedule's SM count. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "models/model.hpp"
#include "runtime/program.hpp"
#include "scheduler/device_calibration.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct CudaEmuOptions {
    uint32_t ctx_len = 0;
    bool stepwise = false;       // one launch per step instead of the resident kernel
    bool kernels = false;        // the kernel-per-op baseline instead of the megakernel
    bool graph = false;          // kernels: replay each step as a captured graph
    bool separate_gpus = false;  // a TP schedule: one emulated device per rank
    uint32_t watchdog_ms = 2000;
    std::string trace_file;
};

// The emulated device mk compiles for when no target is given: a few SMs of an H200's shared memory,
// since every device thread is a fiber on the CPU.
inline constexpr uint32_t kEmuDefaultSms = 8;
inline constexpr uint64_t kEmuSmemOptin = 232448;  // the H200's opt-in shared memory per block (227 KiB)

// Opens the program on the emulator (its configuration: mk_emu::configure, or MK_EMU_SEED / MK_EMU_SMS); `prefill`
// as make_cuda_program's.
std::unique_ptr<Program> make_cuda_emu_program(const Model& model, Schedule schedule, const CudaEmuOptions& options,
                                               std::optional<Schedule> prefill = std::nullopt);

// The calibration micro-kernels (runtime/cuda/calibrate.cu) run by the emulator: "emulated", values that time it.
Calibration run_emulated_calibration();

}  // namespace mk

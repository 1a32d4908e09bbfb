// The resident interpreter kernel's launch interface (host side, no CUDA headers): what the kernel
// reads (the upload layout, weights, memory, counters), how it is sized, and how it is launched.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cstdint>
#include <string>

#include "instructions/device_types.hpp"
#include "runtime/cuda/control.hpp"
#include "runtime/cuda/page_ring.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// One instruction's waits and signals resolved on the host, so a consumer's wait is one load of its slot
// and then the counter (not the record, then the counter's tables, then the counter), and no byte loads.
struct WaitSlot {
    uint32_t counter;
    uint32_t flags;       // kSlotValid | kSlotSystem (a counter a transfer signals: system-scope acquire)
    uint32_t step_total;  // the counter's increment per step
    uint32_t target;      // within the step
};
struct SignalSlot {
    uint32_t counter;
    uint32_t delta_flags;  // delta in the low 16 bits, kSlotValid | kSlotSystem above
};
inline constexpr uint32_t kSlotValid = 1, kSlotSystem = 2;
struct alignas(16) SyncSlots {
    WaitSlot waits[kMaxWaits];  // the valid ones first, in the record's order
    SignalSlot signals[kMaxSignals];
    uint32_t release[PageRing::kMaxPages / 4];  // the page release order, packed by pack_release_order (page_ring.hpp)
};
static_assert(sizeof(SyncSlots) == 112);

struct InterpreterParams {
    // The upload layout (device copies of UploadLayout's arrays).
    const Instruction* instructions;
    const uint32_t* stream_begin;
    const uint32_t* tile_begin;
    const DeviceTile* tiles;
    const uint32_t* release_begin;
    const uint8_t* weight_blob;
    uint32_t n_sms;  // blocks: this GPU's streams (every rank's in loopback, one rank's on separate GPUs)

    DeviceOpContext ctx;       // pos, token and scratch are set per step inside the kernel, and each
                               // block's arena and caches from ctx.ranks; ctx.arena: the first rank's
    // Tensor parallel: block b runs rank first_rank + b / sms_per_rank (one GPU runs all ranks in loopback,
    // one rank each otherwise); its arena, caches and counters are ctx.ranks[rank]'s. The counters
    // (schedule.counters.size() per rank) are monotonic for the kernel's life.
    uint32_t first_rank, sms_per_rank;
    const SyncSlots* sync;     // by instruction, as `instructions`
    uint32_t token_off;        // arena offset of the token this GPU posts (i32): its first rank's sample

    DeviceControl* control;
    Mailbox* mailbox;          // mapped pinned memory (device pointer)
    bool resident;             // loop over posted commands; else run `command` once and end
    Command command;           // the single command of a stepwise launch
    uint64_t watchdog_ns;

    uint32_t n_pages, page_bytes;  // pages per SM
    uint32_t scratch_bytes;

    TraceRecord* trace;        // null: no trace; else (trace_steps, n_instructions) records
    uint32_t trace_steps;
    uint32_t n_instructions;
};

// Shared memory one block needs beside its pages and scratch (barriers, page rings, command copy).
uint32_t interpreter_overhead_bytes();
// 8 warps in all: the register file is split over 4 schedulers, so a 9th warp would cap every thread at 168
// registers (3 warps on one quarter) and the all-ops kernel would spill.
inline constexpr uint32_t kInterpreterConsumerWarps = 7;
inline constexpr uint32_t kInterpreterThreads = 32 * (1 + kInterpreterConsumerWarps);

// Launches the kernel cooperatively (grid = params.n_sms, one block per stream and SM) on `stream` (a cudaStream_t).
// Returns "" or the CUDA error text (a grid that cannot be co-resident is refused by the launch).
std::string launch_interpreter(const InterpreterParams& params, void* stream);

MK_CUDA_BACKEND_END
}  // namespace mk

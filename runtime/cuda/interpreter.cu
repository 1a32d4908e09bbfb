// The resident interpreter: one block per SM runs that SM's instruction stream, step after step.
// Warp 0 is the controller/loader: it walks the stream ahead of the consumers and streams each
// instruction's weight tiles into free shared-memory pages with bulk copies (and prefetches the next
// instruction's into L2), never waiting on counters — weights do not depend on earlier instructions.
// Warps 1..7 are the consumers: they wait on the instruction's counters, run the op on the pages,
// store, and signal. Steps are gated on the previous step's sampled token; commands (runs of steps)
// come from the host through pinned memory, so one launch serves a whole generation.
#include <cuda_runtime.h>

#include "instructions/all_ops.cuh"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/cuda/page_tiles.cuh"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// The prefill rows ops' MMA passes are sized for 7 warps (token_rows.hpp): the consumers must be at least that many.
static_assert(kInterpreterConsumerWarps >= kMmaTeamWarps);

namespace {

using cuda_sync::WaitGuard;

// The instruction queue: the loader stages each instruction the consumers will run into shared memory, with
// its waits' absolute targets for the step, ahead of them (it is ahead anyway: weights do not depend on
// counters). A consumer's per-instruction path then reads shared memory and the counters it polls, no
// record, slot or table from L2 (an L2 hit is ~250 ns, and every acquire invalidates L1).
struct StagedWait {
    uint32_t counter, flags;
    uint64_t target;  // epoch * step_total + target within the step
};
struct alignas(16) StagedInstruction {
    Instruction ins;
    StagedWait waits[kMaxWaits];  // the valid ones first
    SignalSlot signals[kMaxSignals];
    uint32_t release[PageRing::kMaxPages / 4];
    uint32_t tile_begin, n_tiles, used, reserved;
};
static_assert(sizeof(StagedInstruction) == 256);
// 8 entries (2 KiB of the ~18 KiB beside 13 pages): the loader may run 8 instructions ahead, more than the
// pages let it for weight-streaming ops; attention's and the reductions' instructions take no pages.
inline constexpr uint32_t kQueueDepth = 8;
struct InstructionQueue {
    StagedInstruction entries[kQueueDepth];
    uint64_t staged[kQueueDepth];    // mbarrier, count 1: the loader wrote the entry (release.cta)
    uint64_t consumed[kQueueDepth];  // mbarrier, count 1: the consumers are done with it
};

struct SharedState {
    InstructionQueue queue;  // first: 16-byte aligned where SharedState starts
    PageRing loader_ring;
    PageRing consumer_ring;
    Command command;
    int32_t token;     // this step's input token
    uint32_t have_command;  // the command gate's verdict: 0 ends the kernel
    uint32_t go;       // the step gate's verdict: 0 ends the command (or the kernel)
    uint32_t ok;       // the end-of-step verdict: 0 after an abort (a separate word: the gate may overwrite go)
    // A consumer wait was aborted (rank 0, before the team barrier that publishes it), and a page wait saw
    // the abort during the op (any thread, before the next barrier). Two words: rank 0 may raise the
    // first for the next instruction while a slow thread still reads the second for this one. Both only
    // go 0 -> 1 within a step (failure is terminal) and are cleared at the step gate.
    uint32_t wait_failed;
    uint32_t op_failed;
    // The ops' context, one for the block (thread 0 sets pos and token at the step gate): a copy in every thread's
    // registers held ~28 of them through the whole kernel (ptxas: 255 -> 227), room the tensor-core paths need.
    DeviceOpContext ctx;
};

__device__ bool is_stop_token(const Command& c, int32_t token) {
    for (uint32_t k = 0; k < c.n_stop && k < kMaxStopTokens; ++k)
        if (c.stop_tokens[k] == token) return true;
    return false;
}

// A role's ring after instruction `sync`'s `used` pages: its release order in registers, then the hand-off.
__device__ inline void finish_ring(PageRing& ring, const uint32_t (&release)[PageRing::kMaxPages / 4], uint32_t used) {
    const uint4 a = reinterpret_cast<const uint4*>(release)[0], b = reinterpret_cast<const uint4*>(release)[1];
    const uint32_t order[PageRing::kMaxPages / 4] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    ring.finish(order, used);
}

// Warp 0, lane 0: issue every tile of the stream's instructions for one step.
struct Loader {
    const InterpreterParams& P;
    Pages pages;
    PageRing& ring;
    InstructionQueue& queue;
    uint32_t empty_parity = 0;  // parity of each page's next "empty" phase to wait for
    uint32_t fill_parity = 0;   // parity of each page's next fill
    uint32_t filled_once = 0;   // pages that have been filled at least once
    uint32_t staged = 0;           // instructions staged so far (entry staged % kQueueDepth is the next)
    uint32_t consumed_parity = 0;  // parity of each entry's next "consumed" phase

    // Stages instruction i for the step of `epoch` once the consumers are done with the entry's previous one;
    // null when the run was aborted meanwhile. Only this thread writes the entry, so it may read it back.
    __device__ const StagedInstruction* stage(uint32_t i, uint32_t epoch, const WaitGuard& guard) {
        const uint32_t q = staged % kQueueDepth;
        if (staged >= kQueueDepth) {
            if (!wait_phase(&queue.consumed[q], consumed_parity >> q & 1u, guard, true)) return nullptr;
            consumed_parity ^= 1u << q;
        }
        StagedInstruction& e = queue.entries[q];
        const uint4* record = reinterpret_cast<const uint4*>(&P.instructions[i]);
        uint4* copy = reinterpret_cast<uint4*>(&e.ins);
        for (uint32_t k = 0; k < sizeof(Instruction) / sizeof(uint4); ++k) copy[k] = record[k];
        const SyncSlots& sync = P.sync[i];
        for (uint32_t w = 0; w < kMaxWaits; ++w) {
            const WaitSlot wait = sync.waits[w];
            e.waits[w] = {wait.counter, wait.flags, uint64_t(epoch) * wait.step_total + wait.target};
        }
        for (uint32_t g = 0; g < kMaxSignals; ++g) e.signals[g] = sync.signals[g];
        for (uint32_t k = 0; k < PageRing::kMaxPages / 4; ++k) e.release[k] = sync.release[k];
        e.tile_begin = P.tile_begin[i];
        e.n_tiles = P.tile_begin[i + 1] - e.tile_begin;
        e.used = P.release_begin[i + 1] - P.release_begin[i];
        mbarrier_arrive(&queue.staged[q]);
        ++staged;
        return &e;
    }

    __device__ bool run_step(uint32_t begin, uint32_t end, const WaitGuard& guard, uint32_t epoch,
                             const DeviceOpContext& ctx) {
        if (begin < end) prefetch_device_op(P.instructions[begin], ctx);
        for (uint32_t i = begin; i < end; ++i) {
            const StagedInstruction* e = stage(i, epoch, guard);
            if (!e) return false;
            const uint32_t tb = e->tile_begin, te = tb + e->n_tiles, used = e->used;
            if (i + 1 < end) {  // look one instruction further ahead through L2: its tiles, and what else it reads
                for (uint32_t t = P.tile_begin[i + 1]; t < P.tile_begin[i + 2]; ++t)
                    for_each_tile_piece(P.tiles[t], ctx.weights[P.tiles[t].weight].row_bytes,
                                        [&](uint64_t src, uint32_t, uint32_t bytes) { prefetch_l2(P.weight_blob + src, bytes); });
                prefetch_device_op(P.instructions[i + 1], ctx);
            }
            for (uint32_t t = tb; t < te; ++t) {
                const uint32_t p = ring.page_of_tile(t - tb, used);
                if (filled_once >> p & 1u) {
                    if (!wait_phase(&pages.empty[p], empty_parity >> p & 1u, guard, true)) return false;
                    empty_parity ^= 1u << p;
                } else {
                    filled_once |= 1u << p;
                }
                const DeviceTile& tile = P.tiles[t];
                if (P.trace && t == tb && epoch < P.trace_steps)
                    P.trace[uint64_t(epoch) * P.n_instructions + i].load_start = cuda_sync::global_timer_ns();
                mbarrier_arrive_expect_tx(&pages.full[p], tile.bytes);
                for_each_tile_piece(tile, ctx.weights[tile.weight].row_bytes, [&](uint64_t src, uint32_t at, uint32_t bytes) {
                    bulk_copy_to_shared(pages.page(p) + at, P.weight_blob + src, bytes, &pages.full[p]);
                });
                fill_parity ^= 1u << p;
            }
            if (used) finish_ring(ring, e->release, used);
        }
        return true;
    }
    // Bulk copies still in flight must land before the block's shared memory goes away. They land in
    // microseconds on a healthy device; one that has not after the watchdog's bound (1 s without one)
    // is reported (fault flag 3) rather than waited for without end.
    __device__ void drain(const WaitGuard& guard) {
        const uint64_t start = cuda_sync::global_timer_ns();
        const uint64_t bound_ns = guard.bound_ns ? guard.bound_ns : 1000000000ull;
        for (uint32_t p = 0; p < P.n_pages; ++p)
            if (filled_once >> p & 1u)
                while (!mbarrier_try_wait(&pages.full[p], (fill_parity >> p & 1u) ^ 1u)) {
                    const uint64_t waited = cuda_sync::global_timer_ns() - start;
                    if (waited > bound_ns) {
                        cuda_sync::raise_fault(guard, 3, 0xfffffffdu, p, 0, waited);
                        return;
                    }
                }
    }
};

// Warps 1..7: run the stream's instructions for one step.
struct Consumers {
    const InterpreterParams& P;
    Pages pages;
    SharedState& sh;
    Team team;
    uint64_t* counters;  // this block's rank's
    uint32_t full_parity = 0;
    uint32_t taken = 0;          // instructions taken from the queue so far
    uint32_t staged_parity = 0;  // parity of each queue entry's next "staged" phase

    // Forced inline: left a call once the prefill ops joined the switch, its DeviceOpContext& put the context in
    // local memory (a 200-byte stack frame in ptxas -v); inlined, 233 registers and no stack.
    __device__ __forceinline__ bool run_step(uint32_t begin, uint32_t end, WaitGuard guard, uint32_t step,
                                             DeviceOpContext& ctx) {
        for (uint32_t i = begin; i < end; ++i) {
            const uint32_t q = taken++ % kQueueDepth;
            const StagedInstruction& e = sh.queue.entries[q];
            const Instruction& ins = e.ins;
            TraceRecord* trace = P.trace && guard.epoch < P.trace_steps
                                     ? &P.trace[uint64_t(guard.epoch) * P.n_instructions + i]
                                     : nullptr;
            if (team.rank == 0) {
                if (trace) trace->start = cuda_sync::global_timer_ns();
                guard.index = i - begin;
                // The entry, then its counters; the team barrier below publishes the entry to the other threads.
                bool ok = wait_phase(&sh.queue.staged[q], staged_parity >> q & 1u, guard, true);
                guard.opcode = ins.opcode;
                for (uint32_t w = 0; ok && w < kMaxWaits; ++w) {
                    const StagedWait wait = e.waits[w];
                    if (!(wait.flags & kSlotValid)) break;
                    ok = cuda_sync::wait_at_least<uint64_t>(&counters[wait.counter], wait.target, guard, wait.counter,
                                                            (wait.flags & kSlotSystem) != 0);
                }
                if (!ok) sh.wait_failed = 1;
                cuda_sync::fence_proxy_async_global();
                if (trace) trace->ready = cuda_sync::global_timer_ns();
            }
            staged_parity ^= 1u << q;
            team.sync();
            if (sh.wait_failed) return false;

            PageTiles tiles{pages, &sh.consumer_ring, P.tiles + e.tile_begin, e.n_tiles, e.used, full_parity, team,
                            trace ? &trace->load_end : nullptr, guard, true};
            run_device_op(ins, ctx, team, tiles);
            full_parity = tiles.full_parity;
            if (!tiles.ok) sh.op_failed = 1;  // a page wait saw the abort (threads may see it at different times)
            team.sync();                      // the op's stores are done before they are published
            if (sh.op_failed) return false;   // so the whole team leaves together
            if (team.rank == 0) {
                const Effects effects = device_effects(ins);
                if (effects.writes_peer()) {
                    // The peer's counter, after the copy into its memory: system scope (NVLink, another GPU).
                    uint64_t* peer = ctx.ranks[effects.peer_rank].counters;
                    __threadfence_system();
                    for (uint32_t g = 0; g < kMaxSignals; ++g) {
                        const SignalSlot signal = e.signals[g];
                        if (!(signal.delta_flags >> 16 & kSlotValid)) break;
                        cuda_sync::release_add_system(&peer[signal.counter], signal.delta_flags & 0xffffu);
                    }
                } else {
                    // The team barrier above orders the team's stores before this thread's release add, which is
                    // cumulative: no separate fence (one was here, a second fence on every instruction's path).
                    for (uint32_t g = 0; g < kMaxSignals; ++g) {
                        const SignalSlot signal = e.signals[g];
                        const uint32_t flags = signal.delta_flags >> 16, delta = signal.delta_flags & 0xffffu;
                        if (!(flags & kSlotValid)) break;
                        // A counter peers' transfers also signal gets every add at their scope.
                        if (flags & kSlotSystem) cuda_sync::release_add_system(&counters[signal.counter], delta);
                        else cuda_sync::release_add(&counters[signal.counter], delta);
                    }
                }
                // A TP schedule samples the same token on every rank; this GPU's first rank's goes to its host mailbox.
                if (effects.token_off == P.token_off)
                    post_token(step);
                if (tiles.used) finish_ring(sh.consumer_ring, e.release, tiles.used);
                mbarrier_arrive(&sh.queue.consumed[q]);  // the entry's last reader: the loader may refill it
                if (trace) trace->end = cuda_sync::global_timer_ns();
            }
        }
        return true;
    }

    // The step's posting sample instruction (P.token_off's): hand the token to the host, decide whether to go on.
    __device__ void post_token(uint32_t step) {
        const int32_t token = *reinterpret_cast<const int32_t*>(P.ctx.arena + P.token_off);
        const Command& c = sh.command;
        const bool last = step + 1 >= c.n_steps;
        const bool cancel = P.mailbox && cuda_sync::system_load(&P.mailbox->cancel) != 0;
        // Stop tokens count only once the prompt is consumed (the token sampled at a prompt step is discarded).
        const bool generating = step + 1 >= c.n_tokens;
        const bool stop = last || (generating && is_stop_token(c, token)) || cancel;
        P.control->stop = stop ? 1u : 0u;
        // The next step's gate first: the host's copy below (three system-scope fences) is then off the
        // critical path. The block's end-of-step barrier still orders it before this command's run_done.
        cuda_sync::release_store(&P.control->steps_done, step + 1);
        if (P.mailbox) {
            P.mailbox->tokens[step % kTokenRing] = token;
            __threadfence_system();
            if (stop && !last) cuda_sync::system_store(&P.mailbox->stopped, 1u);
            cuda_sync::system_store(&P.mailbox->steps_done, step + 1);
        }
    }
};

// Block 0's thread 0: poll the host's mailbox (system scope: the host writes it while the kernel runs).
__device__ bool wait_for_command(const InterpreterParams& P, uint32_t seq, const WaitGuard& idle) {
    for (uint32_t spin = 1; cuda_sync::system_load(&P.mailbox->command_seq) < seq; ++spin) {
        __nanosleep(spin < 64 ? 64 : 1024);
        if (spin % 16 == 0 && cuda_sync::aborted(idle)) return false;
    }
    return true;
}

// Every thread of the block: run the command's steps.
// Inlined: called as a function, its generic pointers lose their address space (LD.E for LDG.E) and ptxas
// reserves all 16 named barriers and a stack frame.
__device__ __forceinline__ void run_command(const InterpreterParams& P, SharedState& sh, Loader& loader,
                                            Consumers& consumers, DeviceOpContext& ctx, WaitGuard guard) {
    const uint32_t sm = blockIdx.x, tid = threadIdx.x;
    const uint32_t begin = P.stream_begin[sm], end = P.stream_begin[sm + 1];
    const Command& c = sh.command;
    // A register copy: thread 0 may overwrite sh.command with the next command while a slow thread still
    // tests the loop's end after the last step.
    const uint32_t n_steps = c.n_steps;
    for (uint32_t s = 0; s < n_steps; ++s) {
        // Gate: step s starts once step s - 1 sampled its token (it is step s's input) and did not stop the run.
        if (tid == 0) {
            bool go = true;
            if (s > 0) {
                go = cuda_sync::wait_at_least<uint32_t>(&P.control->steps_done, s, guard, 0xffffffffu) &&
                     cuda_sync::acquire_load(&P.control->stop) == 0;
            }
            if (go) {
                sh.token = s < c.n_tokens ? c.tokens[s]
                                          : *reinterpret_cast<volatile const int32_t*>(P.ctx.arena + P.token_off);
            }
            sh.go = go ? 1u : 0u;
            sh.ctx.pos = c.pos0 + int32_t(s);
            sh.ctx.token = sh.token;
            sh.wait_failed = 0;
            sh.op_failed = 0;
        }
        __syncthreads();
        if (!sh.go) return;
        guard.epoch = c.epoch0 + s;
        if (tid < 32) {
            if (tid == 0) loader.run_step(begin, end, guard, guard.epoch, ctx);
        } else {
            consumers.run_step(begin, end, guard, s, ctx);
        }
        // Every thread must take the same way out, so one thread reads the abort flag for the block; block 0's
        // also reads the host's (one PCIe read a step, not one per block) and mirrors it into the device's.
        __syncthreads();
        if (tid == 0) {
            const bool aborted = sm == 0 ? cuda_sync::aborted_mirrored(guard) : cuda_sync::device_aborted(guard);
            sh.ok = aborted ? 0u : 1u;
        }
        __syncthreads();
        if (!sh.ok) return;
    }
}

__global__ void __launch_bounds__(kInterpreterThreads, 1) interpreter_kernel(const __grid_constant__ InterpreterParams P) {
    MK_DYNAMIC_SHARED(uint8_t, smem, 128);
    const uint32_t tid = threadIdx.x, sm = blockIdx.x;
    Pages pages;
    pages.base = smem;
    pages.page_bytes = P.page_bytes;
    float* scratch = reinterpret_cast<float*>(smem + size_t(P.n_pages) * P.page_bytes);
    uint8_t* tail = reinterpret_cast<uint8_t*>(scratch) + P.scratch_bytes;
    pages.full = reinterpret_cast<uint64_t*>(tail);
    pages.empty = pages.full + PageRing::kMaxPages;
    SharedState& sh = *reinterpret_cast<SharedState*>(pages.empty + PageRing::kMaxPages);

    if (tid == 0) {
        for (uint32_t p = 0; p < P.n_pages; ++p) {
            mbarrier_init(&pages.full[p], 1);
            mbarrier_init(&pages.empty[p], blockDim.x / 32 - 1);  // one arrival per consumer warp
        }
        for (uint32_t q = 0; q < kQueueDepth; ++q) {
            mbarrier_init(&sh.queue.staged[q], 1);
            mbarrier_init(&sh.queue.consumed[q], 1);
        }
        ptx::fence_mbarrier_init();
        sh.loader_ring.reset(P.n_pages);
        sh.consumer_ring.reset(P.n_pages);
        sh.wait_failed = 0;
        sh.op_failed = 0;
        sh.ok = 1;
        DeviceOpContext& c = sh.ctx;
        c = P.ctx;
        const RankMemory& own = P.ctx.ranks[P.first_rank + sm / P.sms_per_rank];
        c.arena = own.arena;
        c.k_cache = own.k_cache;
        c.v_cache = own.v_cache;
        c.scratch = scratch;
        c.scratch_floats = P.scratch_bytes / 4;
    }
    __syncthreads();

    DeviceOpContext& ctx = sh.ctx;
    const RankMemory& own = P.ctx.ranks[P.first_rank + sm / P.sms_per_rank];
    WaitGuard guard{P.control, P.mailbox, P.watchdog_ns, sm, 0, 0, 0};
    Loader loader{P, pages, sh.loader_ring, sh.queue};
    Consumers consumers{P, pages, sh, Team{tid - 32, blockDim.x - 32, 1}, own.counters};

    if (!P.resident) {
        if (tid == 0) sh.command = P.command;
        __syncthreads();
        run_command(P, sh, loader, consumers, ctx, guard);
    } else {
        WaitGuard idle = guard;
        idle.bound_ns = 0;  // waiting for the host's next command is not a stall
        for (uint32_t seq = 1;; ++seq) {
            if (tid == 0) {
                bool ok;
                if (sm == 0) {
                    ok = wait_for_command(P, seq, idle);
                    if (ok) {
                        P.control->command = *const_cast<const Command*>(&P.mailbox->command);
                        P.control->steps_done = 0;
                        P.control->stop = 0;
                        __threadfence();
                        cuda_sync::release_store(&P.control->command_seq, seq);
                    }
                } else {
                    ok = cuda_sync::wait_at_least<uint32_t>(&P.control->command_seq, seq, idle, 0xfffffffeu);
                }
                sh.command = P.control->command;
                // Not sh.go: run_command's first gate writes that while slow threads may still read this.
                sh.have_command = ok ? 1u : 0u;
            }
            __syncthreads();
            if (!sh.have_command || CommandKind(sh.command.kind) == CommandKind::exit) break;
            run_command(P, sh, loader, consumers, ctx, guard);
            if (!sh.ok) break;
            // The host may post the next command once every block is done with this one.
            if (tid == 0) {
                const uint32_t done = atomicAdd(&P.control->blocks_done, 1u) + 1;
                if (done == seq * P.n_sms) {
                    __threadfence_system();
                    cuda_sync::system_store(&P.mailbox->run_done, seq);
                }
            }
            // Every thread is past this command's reads of sh.command before thread 0 copies in the next
            // (run_command has no barrier of its own for a command of no steps).
            __syncthreads();
        }
    }
    __syncthreads();
    if (tid == 0) loader.drain(guard);
}

}  // namespace

uint32_t interpreter_overhead_bytes() {
    return uint32_t(2 * PageRing::kMaxPages * sizeof(uint64_t) + (sizeof(SharedState) + 127) / 128 * 128);
}

std::string launch_interpreter(const InterpreterParams& params, void* stream) {
    const size_t smem = size_t(params.n_pages) * params.page_bytes + params.scratch_bytes + interpreter_overhead_bytes();
    cudaError_t status =
        cudaFuncSetAttribute(interpreter_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (status != cudaSuccess) return cudaGetErrorString(status);
    InterpreterParams copy = params;
    void* args[] = {&copy};
    status = cudaLaunchCooperativeKernel(interpreter_kernel, dim3(params.n_sms),
                                         dim3(kInterpreterThreads), args, smem, static_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) return cudaGetErrorString(status);
    return "";
}

MK_CUDA_BACKEND_END
}  // namespace mk

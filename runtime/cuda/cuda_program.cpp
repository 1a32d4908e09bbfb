// The megakernel Program (see cuda_program.hpp): uploads the program state and launches the resident
// interpreter once (or once per step); KernelHost posts its commands and bounds every wait on it, so a
// stuck or dead kernel becomes an error, never a hang. With --tp on separate GPUs: one kernel per GPU,
// each running one rank, treated as one (a prefill chunk too: a launch on every GPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "models/error.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/cuda/kernel_host.hpp"
#include "runtime/cuda/page_ring.hpp"
#include "runtime/cuda/peer_exchange.hpp"
#include "runtime/cuda/trace.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

class PinnedMailbox {
public:
    PinnedMailbox(uint32_t max_tokens) {
        check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(Mailbox), cudaHostAllocMapped), "mailbox");
        std::memset(static_cast<void*>(host_), 0, sizeof(Mailbox));
        check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0), "mailbox mapping");
        check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&tokens_), 4ull * max_tokens, cudaHostAllocMapped), "token buffer");
        check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_tokens_), tokens_, 0), "token mapping");
    }
    ~PinnedMailbox() {
        cudaFreeHost(tokens_);
        cudaFreeHost(host_);
    }
    Mailbox* host_ = nullptr;
    Mailbox* device_ = nullptr;
    int32_t* tokens_ = nullptr;
    int32_t* device_tokens_ = nullptr;
};

// One GPU's share of the program: its ranks (every rank on one GPU, or one rank per GPU with --tp on
// separate GPUs), the kernel's memory, mailbox, control block and stream.
struct Gpu {
    int device = 0;
    uint32_t first_rank = 0;
    std::unique_ptr<DeviceState> state;
    std::unique_ptr<DeviceState> prefill;  // the prefill step over `state`'s weights and caches, or null
    std::unique_ptr<PinnedMailbox> mailbox;
    DeviceBuffer control, trace;
    cudaStream_t stream = nullptr;
    uint32_t scratch_bytes = 0;

    Gpu() = default;
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;
    ~Gpu() {  // its memory is freed on its own device
        cudaSetDevice(device);
        prefill.reset();  // points into `state`
        state.reset();
        trace = DeviceBuffer();
        control = DeviceBuffer();
        mailbox.reset();
        if (stream) cudaStreamDestroy(stream);
    }
    uint32_t n_blocks() const { return uint32_t(state->layout.stream_begin.size() - 1); }
};

// How a refused program names the one that holds the device.
std::string program_name(const Model& model, const Schedule& schedule, bool stepwise) {
    static std::atomic<uint32_t> serial{0};
    return fmt::format("the {} megakernel #{} ({}, {} blocks)", stepwise ? "stepwise" : "resident", ++serial,
                       model.path.filename().string(), schedule.streams.size());
}

KernelHostOptions host_options(const Model& model, const Schedule& schedule, const CudaProgramOptions& options) {
    KernelHostOptions h;
    h.resident = !options.stepwise;
    h.watchdog_ms = options.watchdog_ms;
    h.name = program_name(model, schedule, options.stepwise);
    if (options.separate_gpus && schedule.tp_size > 1) {
        for (uint32_t r = 0; r < schedule.tp_size; ++r) h.devices.push_back(int(r));
    } else {
        int device = 0;
        check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        h.devices.push_back(device);
    }
    return h;
}

class MegakernelProgram final : public Program {
public:
    // The devices are claimed (host_) before anything is uploaded: a refused program allocates nothing.
    MegakernelProgram(const Model& model, Schedule schedule, std::optional<Schedule> prefill,
                      const CudaProgramOptions& options)
        : options_(options), host_(cuda_device_api(), host_options(model, schedule, options)) {
        if (options.separate_gpus && schedule.tp_size > 1) {
            open_separate_gpus(model, schedule, prefill);
        } else {
            auto gpu = std::make_unique<Gpu>();
            check_cuda(cudaGetDevice(&gpu->device), "cudaGetDevice");
            gpu->state = upload_program_state(model, std::move(schedule), options.ctx_len, {RankLayout::separate});
            prepare(*gpu);
            if (prefill) gpu->prefill = upload_prefill_state(model, std::move(*prefill), *gpu->state);
            gpus_.push_back(std::move(gpu));
        }
        for (auto& gpu : gpus_)
            host_.add({gpu->device, gpu->first_rank, gpu->stream, gpu->mailbox->host_, gpu->mailbox->tokens_,
                       gpu->mailbox->device_tokens_, gpu->state->ctx_len, &gpu->state->schedule});
        if (!options.stepwise) {
            try {
                for (auto& gpu : gpus_) launch(*gpu);
            } catch (...) {  // the kernels already launched end before their memory is freed
                if (!host_.shutdown()) leak();
                throw;
            }
        }
    }

    ~MegakernelProgram() override {
        if (!host_.shutdown()) {
            leak();  // nvcc refuses `return void-expression` in a destructor
            return;
        }
        if (!options_.trace_file.empty() && gpus_[0]->trace.bytes()) {
            try {
                write_trace(options_.trace_file);
            } catch (...) {  // a destructor must not throw; the trace is a diagnostic
            }
        }
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        DeviceState& first = *gpus_[0]->state;
        first.check_step(token, pos, host_.next_pos());
        if (host_.broken()) recover();
        resume_resident();
        last_prefill_ = 0;
        const Command c = host_.command(1, std::span<const int32_t>(&token, 1));
        if (options_.stepwise)
            for (auto& gpu : gpus_) launch(*gpu, &c);
        host_.run(c);
        first.new_step();
        return first.sampled_token(host_.last_token(), params, history, pos);
    }

    bool runs_generation(const SamplingParams& params, size_t n_stop) const override {
        return !options_.stepwise && device_loop_samples(params) && n_stop <= kMaxStopTokens;
    }

    DeviceLoopResult run_generation(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stop_tokens,
                                    const std::function<bool(int32_t)>& on_token,
                                    const std::atomic<bool>* cancel) override {
        if (prompt.empty() || n_new == 0) return {};
        DeviceState& first = *gpus_[0]->state;
        const uint32_t pos0 = host_.next_pos(), n_steps = uint32_t(prompt.size()) + n_new - 1;
        if (pos0 + n_steps > first.ctx_len)
            fail("generate: {} prompt and {} new tokens exceed the context of {}", prompt.size(), n_new, first.ctx_len);
        for (uint32_t i = 0; i < prompt.size(); ++i) first.check_step(prompt[i], int32_t(pos0 + i), pos0 + i);
        if (host_.broken()) recover();
        // With a prefill step, every prompt token but the last runs in chunks first; the last is the device loop's
        // first step, which samples the first new token.
        const uint64_t t0 = host_.now_ns();
        uint32_t prefilled = 0, chunks = 0;
        if (has_prefill())
            for (const uint32_t chunk = prefill_tokens(); prefilled + 1 < prompt.size();) {
                if (cancel && cancel->load()) {
                    DeviceLoopResult r;
                    r.n_steps = prefilled;
                    r.n_passes = chunks;
                    r.stopped = r.cancelled = true;
                    return r;
                }
                const uint32_t n = std::min<uint32_t>(chunk, uint32_t(prompt.size()) - 1 - prefilled);
                prefill(prompt.subspan(prefilled, n), int32_t(pos0 + prefilled));
                prefilled += n;
                ++chunks;
            }
        const double prefill_ms = double(host_.now_ns() - t0) / 1e6;
        resume_resident();
        last_prefill_ = 0;
        DeviceLoopResult r = host_.generate(prompt.subspan(prefilled), n_new, stop_tokens, on_token, cancel);
        first.new_step();
        r.n_passes = chunks + r.n_steps;
        r.n_steps += prefilled;
        r.first_token_ms += prefill_ms;
        r.total_ms += prefill_ms;
        return r;
    }

    uint32_t prefill_tokens() const override { return has_prefill() ? gpus_[0]->prefill->schedule.prefill_tokens : 0; }
    bool prefill_all_logits() const override { return has_prefill() && gpus_[0]->prefill->schedule.all_logits; }

    // A chunk is a launch of its own of the interpreter over the prefill step (one step, no command loop; on
    // separate GPUs one launch per GPU, whose ranks exchange their rows as in a decode step): the resident kernel
    // holds every SM, so it is ended first and relaunched before the next decode step.
    void prefill(std::span<const int32_t> tokens, int32_t pos) override {
        if (!has_prefill()) Program::prefill(tokens, pos);
        for (auto& gpu : gpus_) {
            check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
            gpu->prefill->post_chunk(tokens, pos, host_.next_pos());
        }
        if (host_.broken()) recover();
        end_resident();
        last_prefill_ = 0;
        Command c = host_.command(1, tokens.first(1));  // the token is unused: the chunk's are in the arena
        c.epoch0 = prefill_epoch_;
        for (auto& gpu : gpus_) launch(*gpu, &c, gpu->prefill.get(), uint32_t(tokens.size()));
        host_.run_launched(uint32_t(tokens.size()));
        ++prefill_epoch_;
        for (auto& gpu : gpus_) gpu->prefill->new_step();
        last_prefill_ = uint32_t(tokens.size());
    }
    std::span<const float> prefill_logits() const override {
        if (!prefill_all_logits() || last_prefill_ == 0) return Program::prefill_logits();
        check_cuda(cudaSetDevice(gpus_[0]->device), "cudaSetDevice");
        return gpus_[0]->prefill->chunk_logits(last_prefill_, true);
    }

    std::span<const float> logits() const override {
        check_cuda(cudaSetDevice(gpus_[0]->device), "cudaSetDevice");  // rank 0's arena holds them
        if (last_prefill_) return gpus_[0]->prefill->chunk_logits(last_prefill_, false);
        return gpus_[0]->state->host_logits();
    }
    void reset() override { host_.reset_position(); }
    const Schedule& schedule() const override { return gpus_[0]->state->schedule; }
    uint32_t ctx_len() const override { return gpus_[0]->state->ctx_len; }
#ifdef MK_CUDA_EMU
    const char* backend_name() const override { return options_.stepwise ? "cuda-emu-stepwise" : "cuda-emu"; }
#else
    const char* backend_name() const override { return options_.stepwise ? "cuda-stepwise" : "cuda"; }
#endif
    uint32_t n_threads() const override { return 1; }

private:
    // A kernel that ignored the abort may still use this memory, and freeing it would wait for that kernel:
    // it is leaked instead (the device is unusable until the process exits anyway).
    void leak() {
        for (auto& gpu : gpus_) (void)gpu.release();
        (void)exchange_.release();
        (void)prefill_exchange_.release();
    }

    bool has_prefill() const { return gpus_[0]->prefill != nullptr; }

    // Tensor parallel on separate GPUs: rank r on device r, each uploaded by a host thread of its own, with
    // its peers' exchange memory in its rank table; the prefill step's (its arena holds T rows) in an exchange of
    // its own, since a prefill launch and the decode steps never run at once but each keeps its state.
    void open_separate_gpus(const Model& model, const Schedule& schedule, const std::optional<Schedule>& prefill) {
        const uint32_t tp = schedule.tp_size;
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
        if (uint32_t(count) < tp)
            fail("--tp {} --backend cuda: {} GPU(s) visible, the ranks need one each; --tp-loopback {} runs them as SM "
                 "partitions of one GPU", tp, count, tp);
        std::vector<int> devices(tp);
        for (uint32_t r = 0; r < tp; ++r) devices[r] = int(r);
        exchange_ = PeerExchange::open(devices, exchange_arena_bytes(schedule), exchange_counter_bytes(schedule));
        if (prefill)
            prefill_exchange_ =
                PeerExchange::open(devices, exchange_arena_bytes(*prefill), exchange_counter_bytes(*prefill));
        gpus_.resize(tp);
        std::vector<std::exception_ptr> errors(tp);
        std::vector<std::thread> threads;
        for (uint32_t r = 0; r < tp; ++r)
            threads.emplace_back([&, r] {
                try {
                    auto gpu = std::make_unique<Gpu>();
                    gpu->device = devices[r];
                    gpu->first_rank = r;
                    check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
                    const ExchangeRegion& own = exchange_->region(r, r);
                    gpu->state = upload_program_state(model, schedule, options_.ctx_len,
                                                      {RankLayout::one_rank, r, own.arena, own.counters});
                    for (uint32_t peer = 0; peer < tp; ++peer)
                        if (peer != r)
                            gpu->state->set_peer(peer, exchange_->region(r, peer).arena, exchange_->region(r, peer).counters);
                    prepare(*gpu);
                    if (prefill) {
                        const ExchangeRegion& mine = prefill_exchange_->region(r, r);
                        gpu->prefill = upload_prefill_state(model, *prefill, *gpu->state, mine.arena, mine.counters);
                        for (uint32_t peer = 0; peer < tp; ++peer)
                            if (peer != r)
                                gpu->prefill->set_peer(peer, prefill_exchange_->region(r, peer).arena,
                                                       prefill_exchange_->region(r, peer).counters);
                    }
                    gpus_[r] = std::move(gpu);
                } catch (...) {
                    errors[r] = std::current_exception();
                }
            });
        for (std::thread& t : threads) t.join();
        for (const std::exception_ptr& e : errors)
            if (e) std::rethrow_exception(e);
        fmt::print(stderr, "cuda: {} tensor-parallel ranks on GPUs 0..{}, transfers through {}\n", tp, tp - 1,
                   exchange_->path());
    }

    // The checks and buffers of one GPU's kernel (called with its device current).
    void prepare(Gpu& gpu) {
        const DeviceInfo device = current_device();
        const Schedule& s = gpu.state->schedule;
        if (device.major < 9)
            fail("--backend cuda: {} is sm_{}{}; the interpreter is built for sm_90a (Hopper)", device.name, device.major,
                 device.minor);
        // One block per stream: a TP schedule's ranks (--tp-loopback) are disjoint SM partitions of this device.
        const uint64_t n_streams = gpu.n_blocks();
        if (n_streams > device.sm_count) {
            if (s.tp_size > 1)
                fail("schedule: {} rank(s) of {} SMs need {} SMs, {} has {}; compile each rank for this device's share "
                     "(--sms {})", n_streams / s.target.n_sms, s.target.n_sms, n_streams, device.name, device.sm_count,
                     device.sm_count * s.target.n_sms / n_streams);
            fail("schedule: compiled for {} SMs, {} has {}; compile it for this device (--target h200 or --sms {})",
                 n_streams, device.name, device.sm_count, device.sm_count);
        }
        const uint64_t pages = uint64_t(s.target.n_pages) * s.target.page_bytes;
        const uint64_t scratch = op_scratch_bytes(s.dims);
        const uint64_t smem = pages + scratch + interpreter_overhead_bytes();
        if (s.target.n_pages > PageRing::kMaxPages || smem > device.smem_optin)
            fail("schedule: {} pages of {} bytes plus {} bytes of scratch need {} bytes of shared memory per SM; {} "
                 "allows {}", s.target.n_pages, s.target.page_bytes, scratch + interpreter_overhead_bytes(), smem,
                 device.name, device.smem_optin);
        gpu.scratch_bytes = uint32_t(device.smem_optin - pages - interpreter_overhead_bytes()) / 16 * 16;
        gpu.control = DeviceBuffer(sizeof(DeviceControl), "control block");
        if (gpu.first_rank == 0 && options_.trace_steps && !options_.trace_file.empty())
            gpu.trace = DeviceBuffer(sizeof(TraceRecord) * options_.trace_steps * gpu.state->layout.instructions.size(),
                                     "trace");
        check_cuda(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking), "stream");
        gpu.mailbox = std::make_unique<PinnedMailbox>(gpu.state->ctx_len);
    }

    // The launch of `s`: the GPU's decode step, or the prefill step for chunks of n_tokens.
    InterpreterParams params(const Gpu& gpu, const DeviceState& s, uint32_t n_tokens) const {
        const bool decode = &s == gpu.state.get();
        InterpreterParams p{};
        p.instructions = s.instructions.as<Instruction>();
        p.stream_begin = s.stream_begin.as<uint32_t>();
        p.tile_begin = s.tile_begin.as<uint32_t>();
        p.tiles = s.tiles.as<DeviceTile>();
        p.release_begin = s.release_begin.as<uint32_t>();
        p.weight_blob = s.weight_blob();
        p.n_sms = gpu.n_blocks();  // every rank's streams in loopback, one rank's on separate GPUs
        p.ctx = s.ctx;
        p.ctx.n_tokens = int32_t(n_tokens);
        p.first_rank = gpu.first_rank;
        p.sms_per_rank = s.schedule.target.n_sms;
        p.sync = s.sync_slots.as<SyncSlots>();
        // The first rank's sample hands its token to the host. A prefill step posts none: 0 matches no instruction
        // (those that post no token have kNoOffset).
        p.token_off = decode ? s.posted_token_off() : 0;
        p.control = gpu.control.as<DeviceControl>();
        p.mailbox = gpu.mailbox->device_;
        p.resident = !options_.stepwise;
        p.watchdog_ns = uint64_t(options_.watchdog_ms) * 1000000ull;
        p.n_pages = s.schedule.target.n_pages;
        p.page_bytes = uint32_t(s.schedule.target.page_bytes);
        p.scratch_bytes = gpu.scratch_bytes;
        p.trace = decode ? gpu.trace.as<TraceRecord>() : nullptr;  // traces: the decode steps'
        p.trace_steps = decode && gpu.trace.bytes() ? options_.trace_steps : 0;
        p.n_instructions = uint32_t(s.layout.instructions.size());
        return p;
    }

    // Launches the decode step's kernel (resident, or one command), or a prefill chunk of n_tokens (one command).
    void launch(Gpu& gpu, const Command* single = nullptr, const DeviceState* prefill = nullptr, uint32_t n_tokens = 1) {
        check_cuda(cudaSetDevice(gpu.device), "cudaSetDevice");
        InterpreterParams p = params(gpu, prefill ? *prefill : *gpu.state, n_tokens);
        p.resident = !options_.stepwise && !prefill;
        if (single) {
            p.command = *single;
            p.command.tokens = gpu.mailbox->device_tokens_;
            // A stepwise launch starts its command afresh (the resident kernel does this itself).
            check_cuda(cudaMemsetAsync(gpu.control.as<void>(), 0, sizeof(DeviceControl), gpu.stream),
                       "resetting the control block");
        }
        const std::string error = launch_interpreter(p, gpu.stream);
        if (!error.empty())
            fail("--backend cuda: launching the interpreter on {} SMs of GPU {} failed: {}", p.n_sms, gpu.device, error);
        if (!prefill) host_.set_running(!options_.stepwise);
    }

    // Ends the resident kernel (an exit command) so that a prefill chunk's launch can have the SMs.
    void end_resident() {
        if (options_.stepwise || !host_.running()) return;
        if (!host_.shutdown())
            fail("CUDA: the resident kernel on GPU {} did not end for the prefill; the device is unusable until this "
                 "process exits", gpus_[0]->device);
    }
    // Relaunches the resident kernel after a prefill ended it: a fresh kernel starts from zeroed counters,
    // control block and mailbox (epochs from 0); the position carries on.
    void resume_resident() {
        if (options_.stepwise || host_.running()) return;
        restart_kernels();
    }
    void restart_kernels() {
        for (auto& gpu : gpus_) {
            check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
            cudaGetLastError();
            gpu->state->reset_counters();
            check_cuda(cudaMemset(gpu->control.as<void>(), 0, gpu->control.bytes()), "resetting the control block");
        }
        host_.reset_after_relaunch();
        if (!options_.stepwise)
            for (auto& gpu : gpus_) launch(*gpu);
    }

    // After a fault the counters are mid-step: start them over (targets are epoch-relative) and relaunch.
    void recover() {
        host_.abort_and_wait();
        if (host_.wedged()) fail("CUDA: the kernel on GPU {} did not end after the abort; the device is unusable until "
                                 "this process exits", gpus_[0]->device);
        if (has_prefill()) {  // a chunk that faulted left its counters mid-step
            for (auto& gpu : gpus_) {
                check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
                gpu->prefill->reset_counters();
            }
            prefill_epoch_ = 0;
        }
        restart_kernels();
    }

    void write_trace(const std::string& path) const {
        const Gpu& gpu = *gpus_[0];  // rank 0's GPU: every rank in loopback
        check_cuda(cudaSetDevice(gpu.device), "cudaSetDevice");
        const size_t n = gpu.trace.bytes() / sizeof(TraceRecord);
        std::vector<TraceRecord> records(n);
        check_cuda(cudaMemcpy(records.data(), gpu.trace.as<void>(), gpu.trace.bytes(), cudaMemcpyDeviceToHost),
                   "reading the trace");
        const uint32_t steps = std::min(host_.epoch(), options_.trace_steps);
        write_chrome_trace(path, gpu.state->schedule, gpu.state->layout, records, steps);
        fmt::print(stderr, "{}\ntrace written to {}\n",
                   format_trace_summary(summarize_trace(gpu.state->layout, records, steps)), path);
    }

    CudaProgramOptions options_;
    KernelHost host_;  // the mailbox protocol and every bounded wait; holds the device claim longest
    std::unique_ptr<PeerExchange> exchange_;  // separate GPUs only; outlives the GPUs' states that point into it
    std::unique_ptr<PeerExchange> prefill_exchange_;  // the same for the prefill steps (separate GPUs, with -b > 1)
    std::vector<std::unique_ptr<Gpu>> gpus_;  // the first runs rank 0
    uint32_t prefill_epoch_ = 0;              // prefill steps run: their counters' epoch
    uint32_t last_prefill_ = 0;  // tokens of the last call when it was a prefill (logits() reads its arena), else 0
};

}  // namespace

std::unique_ptr<Program> make_cuda_program(const Model& model, Schedule schedule, const CudaProgramOptions& options,
                                           std::optional<Schedule> prefill) {
    return std::make_unique<MegakernelProgram>(model, std::move(schedule), std::move(prefill), options);
}

MK_CUDA_BACKEND_END
}  // namespace mk

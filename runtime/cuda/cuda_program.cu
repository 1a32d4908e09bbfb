// The megakernel Program (see cuda_program.hpp): uploads the program state, launches the resident
// interpreter once (or once per step), posts commands through pinned memory and waits for answers
// with its own timeout, so a stuck or dead kernel becomes an error, never a hang. With --tp on separate
// GPUs it does this for one kernel per GPU, each running one rank, and treats them as one.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "models/error.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/cuda/page_ring.hpp"
#include "runtime/cuda/peer_exchange.hpp"
#include "runtime/cuda/trace.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

namespace {

// The device writes these while the kernel runs: read them through volatile, then order what follows.
uint32_t device_written(const uint32_t& value) {
    const uint32_t v = *static_cast<const volatile uint32_t*>(&value);
    std::atomic_thread_fence(std::memory_order_acquire);
    return v;
}

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
    std::unique_ptr<PinnedMailbox> mailbox;
    DeviceBuffer control, trace;
    cudaStream_t stream = nullptr;
    uint32_t scratch_bytes = 0;

    Gpu() = default;
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;
    ~Gpu() {  // its memory is freed on its own device
        cudaSetDevice(device);
        state.reset();
        trace = DeviceBuffer();
        control = DeviceBuffer();
        mailbox.reset();
        if (stream) cudaStreamDestroy(stream);
    }
    uint32_t n_blocks() const { return uint32_t(state->layout.stream_begin.size() - 1); }
};

class MegakernelProgram final : public CudaProgram {
public:
    MegakernelProgram(const Model& model, Schedule schedule, const CudaProgramOptions& options) : options_(options) {
        if (options.separate_gpus && schedule.tp_size > 1) {
            open_separate_gpus(model, schedule);
        } else {
            auto gpu = std::make_unique<Gpu>();
            check_cuda(cudaGetDevice(&gpu->device), "cudaGetDevice");
            gpu->state = upload_program_state(model, std::move(schedule), options.ctx_len, {RankLayout::separate});
            prepare(*gpu);
            gpus_.push_back(std::move(gpu));
        }
        if (!options.stepwise)
            for (auto& gpu : gpus_) launch(*gpu);
    }

    ~MegakernelProgram() override {
        if (running_) {
            Command exit{};
            exit.kind = uint32_t(CommandKind::exit);
            post(exit);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (!all_ended() && std::chrono::steady_clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            if (!all_ended()) abort_all();
        }
        synchronize_all();
        if (!options_.trace_file.empty() && gpus_[0]->trace.bytes()) {
            try {
                write_trace(options_.trace_file);
            } catch (...) {  // a destructor must not throw; the trace is a diagnostic
            }
        }
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        DeviceState& first = *gpus_[0]->state;
        first.check_step(token, pos, next_pos_);
        for (auto& gpu : gpus_) gpu->mailbox->tokens_[0] = token;
        execute(run_command(1, pos, 1));
        first.new_step();
        const int32_t sampled = first.sampled_token(gpus_[0]->mailbox->host_->tokens[0], params, history, pos);
        ++epoch_;
        ++next_pos_;
        return sampled;
    }

    std::vector<int32_t> generate(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stop_tokens,
                                  const std::function<void(int32_t)>& on_token) override {
        if (prompt.empty() || n_new == 0) return {};
        if (options_.stepwise) fail("generate: the device-side loop needs the resident kernel (not --stepwise)");
        if (stop_tokens.size() > kMaxStopTokens) fail("generate: at most {} stop tokens", kMaxStopTokens);
        DeviceState& first = *gpus_[0]->state;
        const uint32_t n_steps = uint32_t(prompt.size()) + n_new - 1;
        if (next_pos_ + n_steps > first.ctx_len)
            fail("generate: {} prompt and {} new tokens exceed the context of {}", prompt.size(), n_new, first.ctx_len);
        for (uint32_t i = 0; i < prompt.size(); ++i) {
            first.check_step(prompt[i], int32_t(next_pos_ + i), next_pos_ + i);
            for (auto& gpu : gpus_) gpu->mailbox->tokens_[i] = prompt[i];
        }
        Command c = run_command(n_steps, int32_t(next_pos_), uint32_t(prompt.size()));
        c.n_stop = uint32_t(stop_tokens.size());
        std::copy(stop_tokens.begin(), stop_tokens.end(), c.stop_tokens);
        std::vector<int32_t> out;
        Mailbox& m = *gpus_[0]->mailbox->host_;  // every rank samples the same token; the first GPU's are read
        uint32_t streamed = uint32_t(prompt.size()) - 1;  // the first generated token is step n_prompt - 1's
        execute(c, [&](uint32_t steps_done) {
            for (; streamed < steps_done; ++streamed) {
                const int32_t token = m.tokens[streamed % kTokenRing];
                out.push_back(token);
                if (on_token) on_token(token);
            }
        });
        const uint32_t done = m.steps_done;
        epoch_ += done;
        next_pos_ += done;
        first.new_step();
        return out;
    }

    std::span<const float> logits() const override {
        check_cuda(cudaSetDevice(gpus_[0]->device), "cudaSetDevice");  // rank 0's arena holds them
        return gpus_[0]->state->host_logits();
    }
    void reset() override { next_pos_ = 0; }
    const Schedule& schedule() const override { return gpus_[0]->state->schedule; }
    uint32_t ctx_len() const override { return gpus_[0]->state->ctx_len; }
    const char* backend_name() const override { return options_.stepwise ? "cuda-stepwise" : "cuda"; }
    uint32_t n_threads() const override { return 1; }

private:
    // Tensor parallel on separate GPUs: rank r on device r, each uploaded by a host thread of its own, with
    // its peers' exchange memory in its rank table.
    void open_separate_gpus(const Model& model, const Schedule& schedule) {
        const uint32_t tp = schedule.tp_size;
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
        if (uint32_t(count) < tp)
            fail("--tp {} --backend cuda: {} GPU(s) visible, the ranks need one each; --tp-loopback {} runs them as SM "
                 "partitions of one GPU", tp, count, tp);
        std::vector<int> devices(tp);
        for (uint32_t r = 0; r < tp; ++r) devices[r] = int(r);
        exchange_ = PeerExchange::open(devices, exchange_arena_bytes(schedule), exchange_counter_bytes(schedule));
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
        const uint64_t scratch = 4ull * (s.dims.d_model + 1024);
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

    Command run_command(uint32_t n_steps, int32_t pos0, uint32_t n_tokens) const {
        Command c{};
        c.kind = uint32_t(CommandKind::run);
        c.n_steps = n_steps;
        c.epoch0 = epoch_;
        c.pos0 = pos0;
        c.n_tokens = n_tokens;
        return c;
    }

    InterpreterParams params(const Gpu& gpu) const {
        const DeviceState& s = *gpu.state;
        InterpreterParams p{};
        p.instructions = s.instructions.as<Instruction>();
        p.stream_begin = s.stream_begin.as<uint32_t>();
        p.tile_begin = s.tile_begin.as<uint32_t>();
        p.tiles = s.tiles.as<DeviceTile>();
        p.release_begin = s.release_begin.as<uint32_t>();
        p.release_order = s.release_order.as<uint8_t>();
        p.weight_blob = s.blob.as<uint8_t>();
        p.n_sms = gpu.n_blocks();  // every rank's streams in loopback, one rank's on separate GPUs
        p.ctx = s.ctx;
        p.first_rank = gpu.first_rank;
        p.sms_per_rank = s.schedule.target.n_sms;
        p.counter_is_remote = s.counter_is_remote.as<uint8_t>();
        p.step_totals = s.step_totals.as<uint32_t>();
        p.token_off = s.posted_token_off();  // the first rank's sample hands its token to the host
        p.control = gpu.control.as<DeviceControl>();
        p.mailbox = gpu.mailbox->device_;
        p.resident = !options_.stepwise;
        p.watchdog_ns = uint64_t(options_.watchdog_ms) * 1000000ull;
        p.n_pages = s.schedule.target.n_pages;
        p.page_bytes = uint32_t(s.schedule.target.page_bytes);
        p.scratch_bytes = gpu.scratch_bytes;
        p.trace = gpu.trace.as<TraceRecord>();
        p.trace_steps = gpu.trace.bytes() ? options_.trace_steps : 0;
        p.n_instructions = uint32_t(s.layout.instructions.size());
        return p;
    }

    void launch(Gpu& gpu, const Command* single = nullptr) {
        check_cuda(cudaSetDevice(gpu.device), "cudaSetDevice");
        InterpreterParams p = params(gpu);
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
        running_ = !options_.stepwise;
    }

    void post(const Command& c) {
        ++seq_;
        for (auto& gpu : gpus_) {
            Mailbox& m = *gpu->mailbox->host_;
            m.command = c;
            m.command.tokens = gpu->mailbox->device_tokens_;
            m.steps_done = 0;
            m.stopped = 0;
            m.cancel = 0;
            std::atomic_thread_fence(std::memory_order_seq_cst);
            m.command_seq = seq_;
        }
    }

    bool all_ended() const {
        for (const auto& gpu : gpus_)
            if (cudaStreamQuery(gpu->stream) == cudaErrorNotReady) return false;
        return true;
    }
    void abort_all() {
        for (auto& gpu : gpus_) gpu->mailbox->host_->host_abort = 1;
    }
    void synchronize_all() {
        for (auto& gpu : gpus_) {
            cudaSetDevice(gpu->device);
            cudaStreamSynchronize(gpu->stream);
        }
    }
    bool any_fault() const {
        for (const auto& gpu : gpus_)
            if (device_written(gpu->mailbox->host_->fault.flag) != 0) return true;
        return false;
    }

    // Runs one command to its end; progress(steps_done) is called as tokens arrive (resident mode).
    void execute(const Command& c, const std::function<void(uint32_t)>& progress = {}) {
        if (broken_) recover();
        Mailbox& first = *gpus_[0]->mailbox->host_;
        if (options_.stepwise) {
            for (auto& gpu : gpus_) {
                gpu->mailbox->host_->steps_done = 0;
                launch(*gpu, &c);
            }
            for (auto& gpu : gpus_) {
                check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
                check_cuda(cudaStreamSynchronize(gpu->stream), "the interpreter kernel");
            }
            check_fault();
            if (progress) progress(first.steps_done);
            return;
        }
        post(c);
        // The device's watchdog fires first; this bound only catches a kernel that stopped answering.
        const auto limit = std::chrono::milliseconds(uint64_t(options_.watchdog_ms) * 4 + 10000);
        auto last_progress = std::chrono::steady_clock::now();
        uint32_t seen = 0;
        for (;;) {
            bool done = true;
            for (const auto& gpu : gpus_) done = done && gpu->mailbox->host_->run_done == seq_;
            if (done) break;
            if (first.steps_done != seen) {
                seen = first.steps_done;
                last_progress = std::chrono::steady_clock::now();
                if (progress) progress(seen);
            }
            if (any_fault()) break;
            for (const auto& gpu : gpus_) {
                const cudaError_t q = cudaStreamQuery(gpu->stream);
                if (q != cudaErrorNotReady) {
                    running_ = false;
                    broken_ = true;
                    abort_all();  // the other GPUs' kernels would wait for this one's transfers
                    check_cuda(q, "the resident interpreter kernel");
                    fail("the resident interpreter kernel on GPU {} ended unexpectedly", gpu->device);
                }
            }
            if (std::chrono::steady_clock::now() - last_progress > limit) {
                abort_all();
                break;
            }
            // Busy-poll while tokens flow (a sleep would add its granularity to every step's latency);
            // back off only when nothing has arrived for a while.
            if (std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(50))
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            else
                std::this_thread::yield();
        }
        if (progress) progress(first.steps_done);
        if (any_fault() || first.host_abort) {
            abort_all();  // one GPU's fault leaves its peers waiting for its transfers
            synchronize_all();
            running_ = false;
            broken_ = true;
            check_fault();
            fail("the resident interpreter kernel stopped answering for {} ms and was aborted",
                 std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
        }
    }

    // Reports the first GPU's fault record that a watchdog (not the host's abort) wrote, else the first.
    void check_fault() {
        const Gpu* faulted = nullptr;
        uint32_t faulted_flag = 0;
        for (const auto& gpu : gpus_) {
            const uint32_t flag = device_written(gpu->mailbox->host_->fault.flag);
            if (flag != 0 && (!faulted || (flag == 1 && faulted_flag != 1))) {
                faulted = gpu.get();
                faulted_flag = flag;
            }
        }
        if (!faulted) return;
        const FaultRecord f = faulted->mailbox->host_->fault;
        broken_ = true;
        const Schedule& s = faulted->state->schedule;
        const std::string where = gpus_.size() > 1 ? fmt::format(" on GPU {} (rank {})", faulted->device, faulted->first_rank) : "";
        if (f.counter == 0xffffffffu)
            fail("CUDA watchdog{}: sm {} waited {} ms for the previous step's token (step {})", where, f.sm,
                 f.waited_ns / 1000000, f.epoch);
        // The record names the block; its stream in the combined schedule follows its rank's.
        BlockedStream b{faulted->first_rank * s.target.n_sms + f.sm, f.index, uint16_t(f.counter), f.value, f.target};
        fail("CUDA watchdog{}: {} after {} ms\n{}", where, f.flag == 2 ? "aborted by the host" : "a wait exceeded the bound",
             f.waited_ns / 1000000, format_stall_report(s, f.epoch, std::span<const BlockedStream>(&b, 1)));
    }

    // After a fault the counters are mid-step: start them over (targets are epoch-relative) and relaunch.
    void recover() {
        synchronize_all();
        for (auto& gpu : gpus_) {
            check_cuda(cudaSetDevice(gpu->device), "cudaSetDevice");
            cudaGetLastError();
            gpu->state->reset_counters();
            check_cuda(cudaMemset(gpu->control.as<void>(), 0, gpu->control.bytes()), "resetting the control block");
            std::memset(static_cast<void*>(gpu->mailbox->host_), 0, sizeof(Mailbox));
        }
        epoch_ = 0;
        seq_ = 0;
        broken_ = false;
        if (!options_.stepwise)
            for (auto& gpu : gpus_) launch(*gpu);
    }

    void write_trace(const std::string& path) const {
        const Gpu& gpu = *gpus_[0];  // rank 0's GPU: every rank in loopback
        check_cuda(cudaSetDevice(gpu.device), "cudaSetDevice");
        const size_t n = gpu.trace.bytes() / sizeof(TraceRecord);
        std::vector<TraceRecord> records(n);
        check_cuda(cudaMemcpy(records.data(), gpu.trace.as<void>(), gpu.trace.bytes(), cudaMemcpyDeviceToHost),
                   "reading the trace");
        const uint32_t steps = std::min(epoch_, options_.trace_steps);
        write_chrome_trace(path, gpu.state->schedule, gpu.state->layout, records, steps);
        fmt::print(stderr, "{}\ntrace written to {}\n",
                   format_trace_summary(summarize_trace(gpu.state->layout, records, steps)), path);
    }

    CudaProgramOptions options_;
    std::unique_ptr<PeerExchange> exchange_;  // separate GPUs only; outlives the GPUs' states that point into it
    std::vector<std::unique_ptr<Gpu>> gpus_;  // the first runs rank 0
    uint32_t epoch_ = 0, next_pos_ = 0, seq_ = 0;
    bool running_ = false, broken_ = false;
};

}  // namespace

std::unique_ptr<CudaProgram> make_cuda_program(const Model& model, Schedule schedule, const CudaProgramOptions& options) {
    return std::make_unique<MegakernelProgram>(model, std::move(schedule), options);
}

}  // namespace mk

// The megakernel Program (see cuda_program.hpp): uploads the program state, launches the resident
// interpreter once (or once per step), posts commands through pinned memory and waits for answers
// with its own timeout, so a stuck or dead kernel becomes an error, never a hang.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "models/error.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/cuda/page_ring.hpp"
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

class MegakernelProgram final : public CudaProgram {
public:
    MegakernelProgram(const Model& model, Schedule schedule, const CudaProgramOptions& options)
        : options_(options), state_(upload_program_state(model, std::move(schedule), options.ctx_len)),
          mailbox_(state_->ctx_len) {
        const DeviceInfo device = current_device();
        const Schedule& s = state_->schedule;
        if (device.major < 9)
            fail("--backend cuda: {} is sm_{}{}; the interpreter is built for sm_90a (Hopper)", device.name, device.major,
                 device.minor);
        // One block per stream: a TP schedule's ranks (--tp-loopback) are disjoint SM partitions of this device.
        const uint64_t n_streams = s.streams.size();
        if (n_streams > device.sm_count) {
            if (s.tp_size > 1)
                fail("schedule: {} ranks of {} SMs need {} SMs, {} has {}; compile each rank for this device's share "
                     "(--sms {})", s.tp_size, s.target.n_sms, n_streams, device.name, device.sm_count,
                     device.sm_count / s.tp_size);
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
        scratch_bytes_ = uint32_t(device.smem_optin - pages - interpreter_overhead_bytes()) / 16 * 16;
        control_ = DeviceBuffer(sizeof(DeviceControl), "control block");
        if (options.trace_steps && !options.trace_file.empty())
            trace_ = DeviceBuffer(sizeof(TraceRecord) * options.trace_steps * state_->layout.instructions.size(), "trace");
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
        if (!options.stepwise) launch();
    }

    ~MegakernelProgram() override {
        if (running_) {
            Command exit{};
            exit.kind = uint32_t(CommandKind::exit);
            post(exit);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (cudaStreamQuery(stream_) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            if (cudaStreamQuery(stream_) == cudaErrorNotReady) mailbox_.host_->host_abort = 1;
        }
        cudaStreamSynchronize(stream_);
        if (!options_.trace_file.empty() && trace_.bytes()) {
            try {
                write_trace(options_.trace_file);
            } catch (...) {  // a destructor must not throw; the trace is a diagnostic
            }
        }
        cudaStreamDestroy(stream_);
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        state_->check_step(token, pos, next_pos_);
        mailbox_.tokens_[0] = token;
        Command c = run_command(1, pos, 1);
        execute(c);
        state_->new_step();
        const int32_t sampled = state_->sampled_token(mailbox_.host_->tokens[0], params, history, pos);
        ++epoch_;
        ++next_pos_;
        return sampled;
    }

    std::vector<int32_t> generate(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stop_tokens,
                                  const std::function<void(int32_t)>& on_token) override {
        if (prompt.empty() || n_new == 0) return {};
        if (options_.stepwise) fail("generate: the device-side loop needs the resident kernel (not --stepwise)");
        if (stop_tokens.size() > kMaxStopTokens) fail("generate: at most {} stop tokens", kMaxStopTokens);
        const uint32_t n_steps = uint32_t(prompt.size()) + n_new - 1;
        if (next_pos_ + n_steps > state_->ctx_len)
            fail("generate: {} prompt and {} new tokens exceed the context of {}", prompt.size(), n_new, state_->ctx_len);
        for (uint32_t i = 0; i < prompt.size(); ++i) {
            state_->check_step(prompt[i], int32_t(next_pos_ + i), next_pos_ + i);
            mailbox_.tokens_[i] = prompt[i];
        }
        Command c = run_command(n_steps, int32_t(next_pos_), uint32_t(prompt.size()));
        c.n_stop = uint32_t(stop_tokens.size());
        std::copy(stop_tokens.begin(), stop_tokens.end(), c.stop_tokens);
        std::vector<int32_t> out;
        uint32_t streamed = uint32_t(prompt.size()) - 1;  // the first generated token is step n_prompt - 1's
        execute(c, [&](uint32_t steps_done) {
            for (; streamed < steps_done; ++streamed) {
                const int32_t token = mailbox_.host_->tokens[streamed % kTokenRing];
                out.push_back(token);
                if (on_token) on_token(token);
            }
        });
        const uint32_t done = mailbox_.host_->steps_done;
        epoch_ += done;
        next_pos_ += done;
        state_->new_step();
        return out;
    }

    std::span<const float> logits() const override { return state_->host_logits(); }
    void reset() override { next_pos_ = 0; }
    const Schedule& schedule() const override { return state_->schedule; }
    uint32_t ctx_len() const override { return state_->ctx_len; }
    const char* backend_name() const override { return options_.stepwise ? "cuda-stepwise" : "cuda"; }
    uint32_t n_threads() const override { return 1; }

private:
    Command run_command(uint32_t n_steps, int32_t pos0, uint32_t n_tokens) const {
        Command c{};
        c.kind = uint32_t(CommandKind::run);
        c.n_steps = n_steps;
        c.epoch0 = epoch_;
        c.pos0 = pos0;
        c.tokens = mailbox_.device_tokens_;
        c.n_tokens = n_tokens;
        return c;
    }

    InterpreterParams params() const {
        const DeviceState& s = *state_;
        InterpreterParams p{};
        p.instructions = s.instructions.as<Instruction>();
        p.stream_begin = s.stream_begin.as<uint32_t>();
        p.tile_begin = s.tile_begin.as<uint32_t>();
        p.tiles = s.tiles.as<DeviceTile>();
        p.release_begin = s.release_begin.as<uint32_t>();
        p.release_order = s.release_order.as<uint8_t>();
        p.weight_blob = s.blob.as<uint8_t>();
        p.n_sms = uint32_t(s.schedule.streams.size());  // every rank's streams: one block each
        p.ctx = s.ctx;
        p.counters = s.counters.as<uint64_t>();
        p.step_totals = s.step_totals.as<uint32_t>();
        p.token_off = s.schedule.token_off;
        p.control = control_.as<DeviceControl>();
        p.mailbox = mailbox_.device_;
        p.resident = !options_.stepwise;
        p.watchdog_ns = uint64_t(options_.watchdog_ms) * 1000000ull;
        p.n_pages = s.schedule.target.n_pages;
        p.page_bytes = uint32_t(s.schedule.target.page_bytes);
        p.scratch_bytes = scratch_bytes_;
        p.trace = trace_.as<TraceRecord>();
        p.trace_steps = trace_.bytes() ? options_.trace_steps : 0;
        p.n_instructions = uint32_t(s.layout.instructions.size());
        return p;
    }

    void launch(const Command* single = nullptr) {
        InterpreterParams p = params();
        if (single) {
            p.command = *single;
            // A stepwise launch starts its command afresh (the resident kernel does this itself).
            check_cuda(cudaMemsetAsync(control_.as<void>(), 0, sizeof(DeviceControl), stream_), "resetting the control block");
        }
        const std::string error = launch_interpreter(p, stream_);
        if (!error.empty()) fail("--backend cuda: launching the interpreter on {} SMs failed: {}", p.n_sms, error);
        running_ = !options_.stepwise;
    }

    void post(const Command& c) {
        Mailbox& m = *mailbox_.host_;
        m.command = c;
        m.steps_done = 0;
        m.stopped = 0;
        m.cancel = 0;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        m.command_seq = ++seq_;
    }

    // Runs one command to its end; progress(steps_done) is called as tokens arrive (resident mode).
    void execute(const Command& c, const std::function<void(uint32_t)>& progress = {}) {
        if (broken_) recover();
        if (options_.stepwise) {
            mailbox_.host_->steps_done = 0;
            launch(&c);
            check_cuda(cudaStreamSynchronize(stream_), "the interpreter kernel");
            check_fault();
            if (progress) progress(mailbox_.host_->steps_done);
            return;
        }
        post(c);
        Mailbox& m = *mailbox_.host_;
        // The device's watchdog fires first; this bound only catches a kernel that stopped answering.
        const auto limit = std::chrono::milliseconds(uint64_t(options_.watchdog_ms) * 4 + 10000);
        auto last_progress = std::chrono::steady_clock::now();
        uint32_t seen = 0;
        while (m.run_done != seq_) {
            if (m.steps_done != seen) {
                seen = m.steps_done;
                last_progress = std::chrono::steady_clock::now();
                if (progress) progress(seen);
            }
            if (device_written(m.fault.flag) != 0) break;
            const cudaError_t q = cudaStreamQuery(stream_);
            if (q != cudaErrorNotReady) {
                running_ = false;
                broken_ = true;
                check_cuda(q, "the resident interpreter kernel");
                fail("the resident interpreter kernel ended unexpectedly");
            }
            if (std::chrono::steady_clock::now() - last_progress > limit) {
                m.host_abort = 1;
                break;
            }
            // Busy-poll while tokens flow (a sleep would add its granularity to every step's latency);
            // back off only when nothing has arrived for a while.
            if (std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(50))
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            else
                std::this_thread::yield();
        }
        if (progress) progress(m.steps_done);
        if (device_written(m.fault.flag) != 0 || m.host_abort) {
            cudaStreamSynchronize(stream_);
            running_ = false;
            broken_ = true;
            check_fault();
            fail("the resident interpreter kernel stopped answering for {} ms and was aborted",
                 std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
        }
    }

    void check_fault() {
        if (device_written(mailbox_.host_->fault.flag) == 0) return;
        const FaultRecord f = mailbox_.host_->fault;
        broken_ = true;
        const Schedule& s = state_->schedule;
        if (f.counter == 0xffffffffu)
            fail("CUDA watchdog: sm {} waited {} ms for the previous step's token (step {})", f.sm, f.waited_ns / 1000000,
                 f.epoch);
        BlockedStream b{f.sm, f.index, uint16_t(f.counter), f.value, f.target};
        fail("CUDA watchdog: {} after {} ms\n{}", f.flag == 2 ? "aborted by the host" : "a wait exceeded the bound",
             f.waited_ns / 1000000, format_stall_report(s, f.epoch, std::span<const BlockedStream>(&b, 1)));
    }

    // After a fault the counters are mid-step: start them over (targets are epoch-relative) and relaunch.
    void recover() {
        cudaStreamSynchronize(stream_);
        cudaGetLastError();
        check_cuda(cudaMemset(state_->counters.as<void>(), 0, state_->counters.bytes()), "resetting the counters");
        check_cuda(cudaMemset(control_.as<void>(), 0, control_.bytes()), "resetting the control block");
        std::memset(static_cast<void*>(mailbox_.host_), 0, sizeof(Mailbox));
        epoch_ = 0;
        seq_ = 0;
        broken_ = false;
        if (!options_.stepwise) launch();
    }

    void write_trace(const std::string& path) const {
        const size_t n = trace_.bytes() / sizeof(TraceRecord);
        std::vector<TraceRecord> records(n);
        check_cuda(cudaMemcpy(records.data(), trace_.as<void>(), trace_.bytes(), cudaMemcpyDeviceToHost), "reading the trace");
        const uint32_t steps = std::min(epoch_, options_.trace_steps);
        write_chrome_trace(path, state_->schedule, state_->layout, records, steps);
        fmt::print(stderr, "{}\ntrace written to {}\n", format_trace_summary(summarize_trace(state_->layout, records, steps)),
                   path);
    }

    CudaProgramOptions options_;
    std::unique_ptr<DeviceState> state_;
    PinnedMailbox mailbox_;
    DeviceBuffer control_, trace_;
    cudaStream_t stream_ = nullptr;
    uint32_t scratch_bytes_ = 0;
    uint32_t epoch_ = 0, next_pos_ = 0, seq_ = 0;
    bool running_ = false, broken_ = false;
};

}  // namespace

std::unique_ptr<CudaProgram> make_cuda_program(const Model& model, Schedule schedule, const CudaProgramOptions& options) {
    return std::make_unique<MegakernelProgram>(model, std::move(schedule), options);
}

}  // namespace mk

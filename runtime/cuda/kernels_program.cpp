// The kernel-per-op baseline (`--backend cuda-kernels`): the same schedule's instructions, in their
// sequential order, launched as one ordinary kernel per op stage (a stage: consecutive instructions
// of one op signalling one counter, which never depend on each other), optionally captured once into
// a CUDA graph and replayed every step. It is what the megakernel's claims are measured against, so it
// takes what the field's baselines take: every launch after the step's first is a programmatic dependent
// launch (PDL: a kernel's prologue and weight prefetch overlap the previous kernel's tail), captured into
// the graph with its programmatic edges.
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "models/error.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_api.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/op_kernels.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

constexpr uint32_t kBaselineThreads = 256;

int current_ordinal() {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    return device;
}

class KernelsProgram final : public Program {
public:
    KernelsProgram(const Model& model, Schedule schedule, const CudaKernelsOptions& options)
        : options_(options), device_(current_ordinal()),
          claim_(device_, DeviceClaim::Kind::shared, fmt::format("a cuda-kernels program ({})", model.path.filename().string())),
          state_(upload_program_state(model, std::move(schedule), options.ctx_len)) {
        order_stages();
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
        check_cuda(cudaMallocHost(reinterpret_cast<void**>(&host_step_), 3 * sizeof(int32_t)), "step state");
        step_state_ = DeviceBuffer(3 * sizeof(int32_t), "step state");  // {pos, token, n_tokens}
        scratch_bytes_ = uint32_t(op_scratch_bytes(state_->schedule.dims));
    }
    ~KernelsProgram() override {
        std::string error;
        const StreamRef s{device_, stream_};
        if (wedged_ || wait_streams(cuda_device_api(), std::span(&s, 1), limit_ns(), error) == WaitEnd::timed_out) {
            // Kernels still running would make every free below wait for them: leak the memory instead.
            (void)state_.release();
            claim_.keep_forever();
            for (DeviceBuffer* b : {&instructions_, &tile_begin_, &tiles_, &step_state_}) b->leak();
            return;
        }
        if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
        cudaStreamDestroy(stream_);
        cudaFreeHost(host_step_);
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        if (wedged_) fail("CUDA: an earlier step's kernels on GPU {} never ended; the device is unusable until this "
                          "process exits", device_);
        state_->check_step(token, pos, next_pos_);
        host_step_[0] = pos;
        host_step_[1] = token;
        host_step_[2] = 1;
        check_cuda(cudaMemcpyAsync(step_state_.as<void>(), host_step_, 3 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                   "posting the step");
        if (options_.graph) {
            if (!graph_exec_) capture();
            check_cuda(cudaGraphLaunch(graph_exec_, stream_), "replaying the step's graph");
        } else {
            launch_stages();
        }
        check_cuda(cudaMemcpyAsync(host_step_, state_->ctx.arena + state_->schedule.token_off, sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream_),
                   "reading the token");
        wait_step();
        state_->new_step();
        const int32_t sampled = state_->sampled_token(host_step_[0], params, history, pos);
        ++next_pos_;
        return sampled;
    }

    std::span<const float> logits() const override { return state_->host_logits(); }
    void reset() override { next_pos_ = 0; }
    void truncate(uint32_t n_past) override {
        if (n_past > next_pos_) fail("cannot keep {} positions: only {} have run", n_past, next_pos_);
        next_pos_ = n_past;  // rows past n_past are overwritten before anything reads them
    }
    const Schedule& schedule() const override { return state_->schedule; }
    uint32_t ctx_len() const override { return state_->ctx_len; }
    const char* backend_name() const override { return options_.graph ? "cuda-kernels-graph+pdl" : "cuda-kernels+pdl"; }
    uint32_t n_threads() const override { return 1; }

private:
    // The kernels cannot be aborted (no counters, no watchdog): a step past the bound is reported and the
    // program is lost, never waited for without end.
    uint64_t limit_ns() const { return (4ull * options_.watchdog_ms + 10000) * 1000000ull; }
    void wait_step() {
        std::string error;
        const StreamRef s{device_, stream_};
        switch (wait_streams(cuda_device_api(), std::span(&s, 1), limit_ns(), error)) {
        case WaitEnd::idle:
            return;
        case WaitEnd::failed:
            fail("CUDA: the step's kernels failed: {}", error);
        case WaitEnd::timed_out:
            wedged_ = true;
            fail("CUDA: the step's kernels on GPU {} did not end within {} ms; the device is unusable until this "
                 "process exits", device_, limit_ns() / 1000000);
        }
    }

    // Every instruction in sequential (seq) order, its tiles with it, cut into stages.
    void order_stages() {
        const UploadLayout& layout = state_->layout;
        std::vector<uint32_t> order(layout.instructions.size());
        std::iota(order.begin(), order.end(), 0u);
        std::stable_sort(order.begin(), order.end(),
                         [&](uint32_t a, uint32_t b) { return layout.instructions[a].seq < layout.instructions[b].seq; });
        std::vector<Instruction> instructions;
        std::vector<uint32_t> tile_begin;
        std::vector<DeviceTile> tiles;
        for (uint32_t k = 0; k < order.size(); ++k) {
            const Instruction& ins = layout.instructions[order[k]];
            const bool new_stage = k == 0 || ins.opcode != instructions.back().opcode ||
                                   ins.n_signals == 0 || instructions.back().n_signals == 0 ||
                                   ins.signals[0].counter != instructions.back().signals[0].counter;
            if (new_stage) stage_begin_.push_back(k);
            instructions.push_back(ins);
            tile_begin.push_back(uint32_t(tiles.size()));
            tiles.insert(tiles.end(), layout.tiles.begin() + layout.tile_begin[order[k]],
                         layout.tiles.begin() + layout.tile_begin[order[k] + 1]);
        }
        stage_begin_.push_back(uint32_t(order.size()));
        tile_begin.push_back(uint32_t(tiles.size()));
        instructions_ = DeviceBuffer(std::max<size_t>(1, instructions.size()) * sizeof(Instruction), "instructions");
        instructions_.upload(instructions.data(), instructions.size() * sizeof(Instruction), "instructions");
        tile_begin_ = DeviceBuffer(tile_begin.size() * sizeof(uint32_t), "tile index");
        tile_begin_.upload(tile_begin.data(), tile_begin.size() * sizeof(uint32_t), "tile index");
        tiles_ = DeviceBuffer(std::max<size_t>(1, tiles.size()) * sizeof(DeviceTile), "tiles");
        tiles_.upload(tiles.data(), tiles.size() * sizeof(DeviceTile), "tiles");
    }

    void launch_stages() {
        for (size_t s = 0; s + 1 < stage_begin_.size(); ++s) {
            BatchLaunch b{};
            b.instructions = instructions_.as<Instruction>() + stage_begin_[s];
            b.tile_begin = tile_begin_.as<uint32_t>() + stage_begin_[s];
            b.tiles = tiles_.as<DeviceTile>();
            b.weight_blob = state_->blob.as<uint8_t>();
            b.ctx = state_->ctx;
            b.step_state = step_state_.as<int32_t>();
            b.count = stage_begin_[s + 1] - stage_begin_[s];
            b.threads = kBaselineThreads;
            b.scratch_bytes = scratch_bytes_;
            b.programmatic = s > 0;  // the first follows the host's copy of the step state, not a kernel
            check_cuda(launch_instruction_batch(b, stream_), "launching an op stage");
        }
    }

    void capture() {
        cudaGraph_t graph = nullptr;
        check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capturing the step");
        launch_stages();
        check_cuda(cudaStreamEndCapture(stream_, &graph), "capturing the step");
        const cudaError_t status = cudaGraphInstantiate(&graph_exec_, graph, 0);
        cudaGraphDestroy(graph);
        check_cuda(status, "instantiating the step's graph");
    }

    CudaKernelsOptions options_;
    int device_ = 0;
    DeviceClaim claim_;  // before anything is allocated (device_api.hpp)
    std::unique_ptr<DeviceState> state_;
    DeviceBuffer instructions_, tile_begin_, tiles_, step_state_;
    std::vector<uint32_t> stage_begin_;
    cudaStream_t stream_ = nullptr;
    cudaGraphExec_t graph_exec_ = nullptr;
    int32_t* host_step_ = nullptr;  // pinned: {pos, token} in, the sampled token out
    uint32_t scratch_bytes_ = 0;
    uint32_t next_pos_ = 0;
    bool wedged_ = false;
};

}  // namespace

std::unique_ptr<Program> make_cuda_kernels_program(const Model& model, Schedule schedule, const CudaKernelsOptions& options) {
    return std::make_unique<KernelsProgram>(model, std::move(schedule), options);
}

MK_CUDA_BACKEND_END
}  // namespace mk

// The kernel-per-op baseline (`--backend cuda-kernels`): the same schedule's instructions, in their
// sequential order, launched as one ordinary kernel per op stage (a stage: consecutive instructions
// of one op signalling one counter, which never depend on each other), optionally captured once into
// a CUDA graph and replayed every step. It is what the megakernel's claims are measured against, so it
// takes what the field's baselines take: every launch after the step's first is a programmatic dependent
// launch (PDL: a kernel's prologue and weight prefetch overlap the previous kernel's tail), captured into
// the graph with its programmatic edges, and every op launches with its own kernel and launch shape
// (stage_shape).
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "instructions/attn_partial/attn_partial.hpp"
#include "models/error.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_api.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/op_kernels.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

StageShape stage_shape(const Instruction& first, const DeviceTile* first_tile, uint32_t ctx_len) {
    // Matvecs: one warp per weight row, 8 rows a block. A BF16 row of 2048 columns is 4 KiB (8 loads of 16 bytes
    // per lane), so a block streams 32 KiB, 64 KiB for a gate/up pair: 256 blocks for the 2048-row O and down
    // projections and 1024 for gate/up on Llama-3.2-1B, 2-8 per SM of 132 where the schedule's split gives one,
    // while the input each block re-reads from L2 (the 8 KiB RMSNorm input, or the staged matvec input) stays a
    // quarter of its weight bytes.
    constexpr uint32_t kMatvecRowsPerBlock = 8;
    switch (Opcode(first.opcode)) {
    case Opcode::matvec_add:
    case Opcode::rms_gate_up: {
        const uint32_t rows_per_tile = first_tile ? std::max(1u, first_tile->n_rows) : 1;
        const uint32_t row_tiles = std::max(1u, kMatvecRowsPerBlock / rows_per_tile);  // 8 / 4 = 2 at 2048 columns
        const uint32_t per_row_tile = Opcode(first.opcode) == Opcode::rms_gate_up ? 2 : 1;  // gate and up tiles
        const uint32_t rows = std::min(kMatvecRowsPerBlock, row_tiles * rows_per_tile);
        return {32 * rows, row_tiles * per_row_tile};
    }
    case Opcode::attn_partial: {
        // One lane per position, a warp per 32 positions of the record's chunk, which holds at most
        // ceil(ctx_len / n_parts) positions (a graph replays one shape at every position): tg128 (ctx 129 in
        // 16 parts, 9 positions) runs 1 warp where 8 would wait at the merge's barrier.
        const auto a = decode_args<AttnPartialArgs>(first);
        const uint32_t chunk = (ctx_len + std::max(1u, a.n_parts) - 1) / std::max(1u, a.n_parts);
        return {32 * std::clamp((chunk + 31) / 32, 1u, kBatchMaxThreads / 32), 0};
    }
    default:
        // embed and sample (one record each, one block), rms_qkv (24 rows per record on Llama-3.2-1B: 3 per warp),
        // attn_reduce (one record per KV head), rms_lm_head (972 rows per record, its block's argmax): 8 warps.
        return {kBatchMaxThreads, 0};
    }
}

namespace {

int current_ordinal() {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    return device;
}

// One schedule's blocks on the device in sequential order, cut into stages, and its captured graph.
struct Stages {
    DeviceBuffer instructions, tile_begin, tiles;
    std::vector<uint32_t> begin;  // block index where each stage starts, then the total
    std::vector<uint32_t> threads, opcode;
    cudaGraphExec_t graph = nullptr;
    void leak() {
        for (DeviceBuffer* b : {&instructions, &tile_begin, &tiles}) b->leak();
        graph = nullptr;
    }
};

class KernelsProgram final : public Program {
public:
    KernelsProgram(const Model& model, Schedule schedule, const CudaKernelsOptions& options, std::optional<Schedule> prefill)
        : options_(options), device_(current_ordinal()),
          claim_(device_, DeviceClaim::Kind::shared, fmt::format("a cuda-kernels program ({})", model.path.filename().string())),
          state_(upload_program_state(model, std::move(schedule), options.ctx_len)) {
        decode_ = order_stages(*state_);
        if (prefill) {
            prefill_ = upload_prefill_state(model, std::move(*prefill), *state_);
            prefill_stages_ = order_stages(*prefill_);
        }
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
            (void)prefill_.release();
            (void)state_.release();
            claim_.keep_forever();
            decode_.leak();
            prefill_stages_.leak();
            step_state_.leak();
            return;
        }
        for (const Stages* st : {&decode_, &prefill_stages_})
            if (st->graph) cudaGraphExecDestroy(st->graph);
        cudaStreamDestroy(stream_);
        cudaFreeHost(host_step_);
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        check_usable();
        state_->check_step(token, pos, next_pos_);
        last_prefill_ = 0;
        enqueue(decode_, *state_, pos, token, 1);
        check_cuda(cudaMemcpyAsync(host_step_, state_->ctx.arena + state_->schedule.token_off, sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream_),
                   "reading the token");
        wait_step();
        state_->new_step();
        const int32_t sampled = state_->sampled_token(host_step_[0], params, history, pos);
        ++next_pos_;
        return sampled;
    }

    uint32_t prefill_tokens() const override { return prefill_ ? prefill_->schedule.prefill_tokens : 0; }
    bool prefill_all_logits() const override { return prefill_ && prefill_->schedule.all_logits; }
    // A chunk: the prefill step's stages (or their graph) over the same weights and KV cache.
    void prefill(std::span<const int32_t> tokens, int32_t pos) override {
        if (!prefill_) Program::prefill(tokens, pos);
        check_usable();
        prefill_->post_chunk(tokens, pos, next_pos_);
        last_prefill_ = 0;
        enqueue(prefill_stages_, *prefill_, pos, 0, int32_t(tokens.size()));
        wait_step();
        prefill_->new_step();
        next_pos_ += uint32_t(tokens.size());
        last_prefill_ = uint32_t(tokens.size());
    }
    std::span<const float> prefill_logits() const override {
        if (!prefill_all_logits() || last_prefill_ == 0) return Program::prefill_logits();
        return prefill_->chunk_logits(last_prefill_, true);
    }

    std::span<const float> logits() const override {
        return last_prefill_ ? prefill_->chunk_logits(last_prefill_, false) : state_->host_logits();
    }
    void reset() override { next_pos_ = 0; }
    void truncate(uint32_t n_past) override {
        if (n_past > next_pos_) fail("cannot keep {} positions: only {} have run", n_past, next_pos_);
        next_pos_ = n_past;  // rows past n_past are overwritten before anything reads them
    }
    const Schedule& schedule() const override { return state_->schedule; }
    uint32_t ctx_len() const override { return state_->ctx_len; }
#ifdef MK_CUDA_EMU
    const char* backend_name() const override {
        return options_.graph ? "cuda-kernels-emu-graph+pdl" : "cuda-kernels-emu+pdl";
    }
#else
    const char* backend_name() const override { return options_.graph ? "cuda-kernels-graph+pdl" : "cuda-kernels+pdl"; }
#endif
    uint32_t n_threads() const override { return 1; }

private:
    // The kernels cannot be aborted (no counters, no watchdog): a step past the bound is reported and the
    // program is lost, never waited for without end.
    uint64_t limit_ns() const { return (4ull * options_.watchdog_ms + 10000) * 1000000ull; }
    void check_usable() const {
        if (wedged_) fail("CUDA: an earlier step's kernels on GPU {} never ended; the device is unusable until this "
                          "process exits", device_);
    }
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

    // Every instruction in sequential (seq) order, its tiles with it, cut into stages; each stage's records dealt
    // to blocks by its launch shape (stage_shape): a record whose tiles are split becomes several blocks, each a
    // copy of the record with a range of its tiles.
    static Stages order_stages(const DeviceState& state) {
        Stages out;
        const UploadLayout& layout = state.layout;
        std::vector<uint32_t> order(layout.instructions.size());
        std::iota(order.begin(), order.end(), 0u);
        std::stable_sort(order.begin(), order.end(),
                         [&](uint32_t a, uint32_t b) { return layout.instructions[a].seq < layout.instructions[b].seq; });
        std::vector<uint32_t> record_stage_begin;
        for (uint32_t k = 0; k < order.size(); ++k) {
            const Instruction& ins = layout.instructions[order[k]];
            const Instruction* last = k ? &layout.instructions[order[k - 1]] : nullptr;
            if (!last || ins.opcode != last->opcode || ins.n_signals == 0 || last->n_signals == 0 ||
                ins.signals[0].counter != last->signals[0].counter)
                record_stage_begin.push_back(k);
        }
        record_stage_begin.push_back(uint32_t(order.size()));

        std::vector<Instruction> blocks;  // one record per block
        std::vector<uint32_t> tile_begin;
        std::vector<DeviceTile> tiles;
        for (size_t s = 0; s + 1 < record_stage_begin.size(); ++s) {
            const uint32_t first = order[record_stage_begin[s]];
            const bool has_tile = layout.tile_begin[first] < layout.tile_begin[first + 1];
            const StageShape shape = stage_shape(layout.instructions[first],
                                                 has_tile ? &layout.tiles[layout.tile_begin[first]] : nullptr,
                                                 state.ctx_len);
            out.begin.push_back(uint32_t(blocks.size()));
            out.threads.push_back(shape.threads);
            out.opcode.push_back(layout.instructions[first].opcode);
            for (uint32_t k = record_stage_begin[s]; k < record_stage_begin[s + 1]; ++k) {
                const uint32_t i = order[k], t0 = layout.tile_begin[i], t1 = layout.tile_begin[i + 1];
                const uint32_t per_block = shape.tiles_per_block ? shape.tiles_per_block : std::max(1u, t1 - t0);
                uint32_t t = t0;
                do {  // a record without tiles is one block
                    const uint32_t end = std::min(t1, t + per_block);
                    blocks.push_back(layout.instructions[i]);
                    tile_begin.push_back(uint32_t(tiles.size()));
                    tiles.insert(tiles.end(), layout.tiles.begin() + t, layout.tiles.begin() + end);
                    t = end;
                } while (t < t1);
            }
        }
        out.begin.push_back(uint32_t(blocks.size()));
        tile_begin.push_back(uint32_t(tiles.size()));
        out.instructions = DeviceBuffer(std::max<size_t>(1, blocks.size()) * sizeof(Instruction), "instructions");
        out.instructions.upload(blocks.data(), blocks.size() * sizeof(Instruction), "instructions");
        out.tile_begin = DeviceBuffer(tile_begin.size() * sizeof(uint32_t), "tile index");
        out.tile_begin.upload(tile_begin.data(), tile_begin.size() * sizeof(uint32_t), "tile index");
        out.tiles = DeviceBuffer(std::max<size_t>(1, tiles.size()) * sizeof(DeviceTile), "tiles");
        out.tiles.upload(tiles.data(), tiles.size() * sizeof(DeviceTile), "tiles");
        return out;
    }

    // Posts the step's {pos, token, n_tokens} and enqueues its stages (replays their graph with --graph).
    void enqueue(Stages& st, const DeviceState& state, int32_t pos, int32_t token, int32_t n_tokens) {
        host_step_[0] = pos;
        host_step_[1] = token;
        host_step_[2] = n_tokens;
        check_cuda(cudaMemcpyAsync(step_state_.as<void>(), host_step_, 3 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                   "posting the step");
        if (options_.graph) {
            if (!st.graph) capture(st, state);
            check_cuda(cudaGraphLaunch(st.graph, stream_), "replaying the step's graph");
        } else {
            launch_stages(st, state);
        }
    }

    void launch_stages(const Stages& st, const DeviceState& state) {
        for (size_t s = 0; s + 1 < st.begin.size(); ++s) {
            BatchLaunch b{};
            b.opcode = st.opcode[s];
            b.instructions = st.instructions.as<Instruction>() + st.begin[s];
            b.tile_begin = st.tile_begin.as<uint32_t>() + st.begin[s];
            b.tiles = st.tiles.as<DeviceTile>();
            b.weight_blob = state.weight_blob();
            b.ctx = state.ctx;
            b.step_state = step_state_.as<int32_t>();
            b.count = st.begin[s + 1] - st.begin[s];
            b.threads = st.threads[s];
            b.scratch_bytes = scratch_bytes_;
            b.programmatic = s > 0;  // the first follows the host's copy of the step state, not a kernel
            check_cuda(launch_instruction_batch(b, stream_), "launching an op stage");
        }
    }

    void capture(Stages& st, const DeviceState& state) {
        cudaGraph_t graph = nullptr;
        check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capturing the step");
        launch_stages(st, state);
        check_cuda(cudaStreamEndCapture(stream_, &graph), "capturing the step");
        const cudaError_t status = cudaGraphInstantiate(&st.graph, graph, 0);
        cudaGraphDestroy(graph);
        check_cuda(status, "instantiating the step's graph");
    }

    CudaKernelsOptions options_;
    int device_ = 0;
    DeviceClaim claim_;  // before anything is allocated (device_api.hpp)
    std::unique_ptr<DeviceState> state_;
    std::unique_ptr<DeviceState> prefill_;  // the prefill step over state_'s weights and caches; null without one
    Stages decode_, prefill_stages_;
    DeviceBuffer step_state_;
    cudaStream_t stream_ = nullptr;
    int32_t* host_step_ = nullptr;  // pinned: {pos, token} in, the sampled token out
    uint32_t scratch_bytes_ = 0;
    uint32_t next_pos_ = 0;
    uint32_t last_prefill_ = 0;  // tokens of the last call when it was a prefill (logits() reads its arena), else 0
    bool wedged_ = false;
};

}  // namespace

std::unique_ptr<Program> make_cuda_kernels_program(const Model& model, Schedule schedule, const CudaKernelsOptions& options,
                                                   std::optional<Schedule> prefill) {
    return std::make_unique<KernelsProgram>(model, std::move(schedule), options, std::move(prefill));
}

MK_CUDA_BACKEND_END
}  // namespace mk

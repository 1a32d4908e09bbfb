// The CPU Program: arena, KV cache and bound weights around the virtual-SM interpreter.
#include <thread>
#include <vector>

#include "models/error.hpp"
#include "runtime/cpu/interpreter.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/program.hpp"

namespace mk {

namespace {

class CpuProgram final : public Program {
public:
    CpuProgram(const Model& model, Schedule schedule, const ProgramOptions& options)
        : weights_(bind_weights(model, schedule)) {
        const ModelDims& d = schedule.dims;
        ctx_len_ = options.ctx_len ? options.ctx_len : uint32_t(std::min<int64_t>(model.config.context_length, 4096));
        if (int64_t(ctx_len_) > model.config.context_length)
            fail("{}: context {} exceeds the model's {}", model.path.string(), ctx_len_, model.config.context_length);
        const uint64_t cache_floats = uint64_t(d.n_layers) * d.kv_dim() * ctx_len_;
        try {
            arena_.assign(schedule.arena_bytes / 4 + 1, 0.0f);
            k_cache_.assign(cache_floats, 0.0f);
            v_cache_.assign(cache_floats, 0.0f);
        } catch (const std::bad_alloc&) {
            fail("cannot allocate the KV cache: {} bytes for context {}", 8 * cache_floats, ctx_len_);
        }
        ProgramMemory memory;
        memory.arena = reinterpret_cast<uint8_t*>(arena_.data());
        memory.weights = weights_.refs.data();
        memory.k_cache = k_cache_.data();
        memory.v_cache = v_cache_.data();
        memory.ctx_len = ctx_len_;
        memory.rope_inv_freq = weights_.rope_inv_freq.data();
        InterpreterOptions io;
        io.n_threads = options.n_threads ? options.n_threads : std::max(1u, std::thread::hardware_concurrency());
        io.check_pages = options.check_pages;
        io.detect_races = options.detect_races;
        interpreter_ = std::make_unique<Interpreter>(std::move(schedule), memory, io);
    }

    int32_t step(int32_t token, int32_t pos, const SamplingParams& params, std::span<const int32_t> history) override {
        if (pos < 0 || uint32_t(pos) >= ctx_len_) fail("position {} is outside the context of {} tokens", pos, ctx_len_);
        if (uint32_t(pos) != next_pos_) fail("position {} does not follow the previous step (expected {})", pos, next_pos_);
        StepState state;
        state.token = token;
        state.pos = pos;
        state.epoch = epoch_;
        state.sampling = params;
        state.history = history.data();
        state.n_history = int32_t(history.size());
        try {
            interpreter_->run_step(state);
        } catch (...) {
            interpreter_->reset(epoch_);  // counters are mid-step after a failure
            throw;
        }
        ++epoch_;
        ++next_pos_;
        return state.sampled_token;
    }

    std::span<const float> logits() const override {
        const Schedule& s = interpreter_->schedule();
        return {reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(arena_.data()) + s.logits_off), s.dims.vocab};
    }
    void reset() override { next_pos_ = 0; }
    const Schedule& schedule() const override { return interpreter_->schedule(); }
    uint32_t ctx_len() const override { return ctx_len_; }
    const char* backend_name() const override { return "cpu"; }
    uint32_t n_threads() const override { return interpreter_->n_threads(); }

private:
    ModelWeights weights_;
    std::vector<float> arena_;    // the activation arena, float-aligned
    std::vector<float> k_cache_;  // (n_layers, n_kv_heads, ctx_len, head_dim) fp32
    std::vector<float> v_cache_;  // (n_layers, n_kv_heads, ctx_len, head_dim) fp32
    uint32_t ctx_len_ = 0;
    uint32_t epoch_ = 0;
    uint32_t next_pos_ = 0;
    std::unique_ptr<Interpreter> interpreter_;
};

}  // namespace

std::unique_ptr<Program> make_cpu_program(const Model& model, Schedule schedule, const ProgramOptions& options) {
    return std::make_unique<CpuProgram>(model, std::move(schedule), options);
}

}  // namespace mk

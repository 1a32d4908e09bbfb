// The CPU Program: arena, KV cache and bound weights around the virtual-SM interpreter. Tensor-parallel
// ranks get an arena each, as separate GPUs would, so a transfer is the only way into a peer's buffers.
// A prefill schedule, when given, runs in a second interpreter with its own arenas (one per rank) over the same
// weights and cache.
// A context whose KV cache cannot fit the available memory (MemAvailable, or MK_MEMORY_LIMIT) is refused
// before allocating.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "instructions/device_types.hpp"
#include "models/error.hpp"
#include "runtime/cpu/interpreter.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/program.hpp"

namespace mk {

namespace {

// Bytes the process may still use, and where that number comes from. MK_MEMORY_LIMIT (bytes, or with a
// K/M/G suffix) overrides /proc/meminfo's MemAvailable; 0 when neither is known (then nothing is refused).
uint64_t available_memory_bytes(std::string& source) {
    if (const char* env = std::getenv("MK_MEMORY_LIMIT"); env && *env) {
        source = "MK_MEMORY_LIMIT";
        char* end = nullptr;
        const unsigned long long value = std::strtoull(env, &end, 10);
        const std::string suffix = end;
        const uint64_t scale = suffix.empty() ? 1 : suffix == "K" ? 1ull << 10 : suffix == "M" ? 1ull << 20
                                                 : suffix == "G" ? 1ull << 30 : 0;
        if (end == env || scale == 0 || value > UINT64_MAX / scale)
            fail("MK_MEMORY_LIMIT={}: expected a byte count such as 4000000000 or 4G", env);
        return value * scale;
    }
    source = "MemAvailable in /proc/meminfo";
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    uint64_t kib = 0;
    while (meminfo >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return 0;
}

// A schedule's activation arena as one allocation per tensor-parallel rank (one region without TP), as separate
// GPUs would hold it, each base biased by its region's start so the schedule's offsets index it
// (ProgramMemory::rank_arenas). allocate() throws std::bad_alloc.
struct RankArenas {
    std::vector<std::vector<float>> arenas;  // float-aligned
    std::vector<uint8_t*> bases;
    void allocate(const Schedule& s) {
        const uint64_t region = s.tp_size > 1 ? s.rank_arena_bytes : s.arena_bytes;
        arenas.resize(s.tp_size);
        for (uint32_t r = 0; r < s.tp_size; ++r) {
            arenas[r].assign(region / 4 + 1, 0.0f);
            bases.push_back(rank_biased(reinterpret_cast<uint8_t*>(arenas[r].data()), r * region));
        }
    }
};

class CpuProgram final : public Program {
public:
    CpuProgram(const Model& model, Schedule schedule, const ProgramOptions& options, std::optional<Schedule> prefill)
        : weights_(bind_weights(model, schedule)) {
        const ModelDims& d = schedule.dims;
        ctx_len_ = default_ctx_len(options.ctx_len, model.config);
        if (int64_t(ctx_len_) > model.config.context_length)
            fail("{}: context {} exceeds the model's {}", model.path.string(), ctx_len_, model.config.context_length);
        const uint64_t cache_elements = uint64_t(d.n_layers) * d.kv_dim() * ctx_len_;
        // vector::assign of more than the machine has is not a bad_alloc under overcommit but an OOM kill
        // while zero-filling, so the budget is checked first. The mapped weights count: a step reads them all.
        const uint64_t cache_bytes = d.kv_bytes() * cache_elements;
        const uint64_t kv_bytes = 2 * cache_bytes;
        const uint64_t arena_bytes = schedule.arena_bytes + 4 + (prefill ? prefill->arena_bytes + 4 : 0);
        const uint64_t needed = kv_bytes + arena_bytes + model.total_weight_bytes;
        std::string source;
        if (const uint64_t available = available_memory_bytes(source); available && needed > available)
            fail("{}: context {} needs {} bytes of KV cache ({} with the {}-byte arena and {} bytes of weights), but "
                 "only {} bytes are available ({}); use a smaller context (-c)",
                 model.path.string(), ctx_len_, kv_bytes, needed, arena_bytes, model.total_weight_bytes, available,
                 source);
        try {
            arenas_.allocate(schedule);
            k_cache_.assign((cache_bytes + 3) / 4, 0.0f);
            v_cache_.assign((cache_bytes + 3) / 4, 0.0f);
        } catch (const std::bad_alloc&) {
            fail("{}: cannot allocate the KV cache: {} bytes for context {}", model.path.string(), kv_bytes, ctx_len_);
        }
        ProgramMemory memory;
        memory.arena = arenas_.bases[0];
        memory.rank_arenas = arenas_.bases.data();
        memory.weights = weights_.refs.data();
        memory.k_cache = k_cache_.data();
        memory.v_cache = v_cache_.data();
        memory.ctx_len = ctx_len_;
        memory.rope_inv_freq = weights_.rope_inv_freq.data();
        InterpreterOptions io;
        io.n_threads = options.n_threads ? options.n_threads : std::max(1u, std::thread::hardware_concurrency());
        io.check_pages = options.check_pages;
        io.detect_races = options.detect_races;
        io.dots = options.dots;
        interpreter_ = std::make_unique<Interpreter>(std::move(schedule), memory, io);
        if (prefill) start_prefill(std::move(*prefill), memory, io);
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
        last_prefill_ = 0;
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
        if (last_prefill_ > 0) {  // the chunk's last token's
            const Schedule& p = prefill_->schedule();
            const uint64_t row = p.all_logits ? last_prefill_ - 1 : 0;
            return {prefill_logits_base() + row * p.dims.vocab, p.dims.vocab};
        }
        const Schedule& s = interpreter_->schedule();
        return {reinterpret_cast<const float*>(arenas_.bases[0] + s.logits_off), s.dims.vocab};  // rank 0's
    }
    uint32_t prefill_tokens() const override { return prefill_ ? prefill_->schedule().prefill_tokens : 0; }
    bool prefill_all_logits() const override { return prefill_ && prefill_->schedule().all_logits; }
    void prefill(std::span<const int32_t> tokens, int32_t pos) override {
        if (!prefill_) Program::prefill(tokens, pos);
        const Schedule& p = prefill_->schedule();
        if (tokens.empty() || tokens.size() > p.prefill_tokens)
            fail("prefill of {} tokens: a chunk holds 1 to {}", tokens.size(), p.prefill_tokens);
        if (pos < 0 || uint64_t(pos) + tokens.size() > ctx_len_)
            fail("positions {}..{} are outside the context of {} tokens", pos, pos + int64_t(tokens.size()) - 1, ctx_len_);
        if (uint32_t(pos) != next_pos_) fail("position {} does not follow the previous step (expected {})", pos, next_pos_);
        for (uint32_t r = 0; r < p.tp_size; ++r)  // every rank embeds the chunk
            std::memcpy(prefill_arenas_.bases[r] + p.tokens_off + uint64_t(r) * p.rank_arena_bytes, tokens.data(),
                        4 * tokens.size());
        StepState state;
        state.pos = pos;
        state.n_tokens = int32_t(tokens.size());
        state.epoch = prefill_epoch_;
        last_prefill_ = 0;
        try {
            prefill_->run_step(state);
        } catch (...) {
            prefill_->reset(prefill_epoch_);
            throw;
        }
        ++prefill_epoch_;
        next_pos_ += uint32_t(tokens.size());
        last_prefill_ = uint32_t(tokens.size());
    }
    std::span<const float> prefill_logits() const override {
        if (!prefill_all_logits() || last_prefill_ == 0) return Program::prefill_logits();
        return {prefill_logits_base(), size_t(last_prefill_) * prefill_->schedule().dims.vocab};
    }
    void reset() override { next_pos_ = 0; }
    void truncate(uint32_t n_past) override {
        if (n_past > next_pos_) fail("cannot keep {} positions: only {} have run", n_past, next_pos_);
        next_pos_ = n_past;  // rows past n_past are overwritten before anything reads them
    }
    // The host layout is fp32 whatever the cache stores: a bf16 cache widens on read and rounds on write.
    void read_kv(uint32_t n_past, std::span<float> k, std::span<float> v) const override {
        copy_kv(n_past, k.size(), v.size());
        const bool bf16 = schedule().dims.kv_type == uint32_t(KvType::bf16);
        for_each_row(n_past, [&](size_t cache, size_t host, size_t n) {
            for (auto [from, to] : {std::pair{k_cache_.data(), k.data()}, std::pair{v_cache_.data(), v.data()}}) {
                if (!bf16) {
                    std::copy_n(from + cache, n, to + host);
                    continue;
                }
                const uint16_t* rows = reinterpret_cast<const uint16_t*>(from) + cache;
                for (size_t i = 0; i < n; ++i) to[host + i] = bf16_to_f32(rows[i]);
            }
        });
    }
    void write_kv(uint32_t n_past, std::span<const float> k, std::span<const float> v) override {
        copy_kv(n_past, k.size(), v.size());
        const bool bf16 = schedule().dims.kv_type == uint32_t(KvType::bf16);
        for_each_row(n_past, [&](size_t cache, size_t host, size_t n) {
            for (auto [from, to] : {std::pair{k.data(), k_cache_.data()}, std::pair{v.data(), v_cache_.data()}}) {
                if (!bf16) {
                    std::copy_n(from + host, n, to + cache);
                    continue;
                }
                uint16_t* rows = reinterpret_cast<uint16_t*>(to) + cache;
                for (size_t i = 0; i < n; ++i) rows[i] = f32_to_bf16(from[host + i]);
            }
        });
        next_pos_ = n_past;
    }
    const Schedule& schedule() const override { return interpreter_->schedule(); }
    uint32_t ctx_len() const override { return ctx_len_; }
    const char* backend_name() const override { return "cpu"; }
    uint32_t n_threads() const override { return interpreter_->n_threads(); }

private:
    // The prefill step's own arenas (one per rank, as the decode step's) and counters over the same weights and
    // KV cache. The race detector tracks one position a step, so it checks the decode steps only.
    void start_prefill(Schedule prefill, const ProgramMemory& decode_memory, InterpreterOptions io) {
        const Schedule& s = interpreter_->schedule();
        if (prefill.prefill_tokens == 0) fail("the prefill schedule is a decode step (compile it with --prefill T)");
        if (prefill.tp_size != s.tp_size)
            fail("the prefill schedule is for {} tensor-parallel rank(s), the decode schedule for {}", prefill.tp_size,
                 s.tp_size);
        if (prefill.config_hash != s.config_hash || prefill.weights.size() != s.weights.size())
            fail("the prefill schedule was compiled for another model");
        for (size_t id = 0; id < s.weights.size(); ++id)
            if (prefill.weights[id].dtype != s.weights[id].dtype || prefill.weights[id].row_bytes != s.weights[id].row_bytes)
                fail("the prefill schedule expects weight {} in another format", id);
        try {
            prefill_arenas_.allocate(prefill);
        } catch (const std::bad_alloc&) {
            fail("cannot allocate the prefill arena of {} bytes", prefill.arena_bytes);
        }
        ProgramMemory memory = decode_memory;
        memory.arena = prefill_arenas_.bases[0];
        memory.rank_arenas = prefill_arenas_.bases.data();
        io.detect_races = false;
        prefill_ = std::make_unique<Interpreter>(std::move(prefill), memory, io);
    }
    // Rank 0's prefill logits (the peers send it their vocabulary slices).
    const float* prefill_logits_base() const {
        return reinterpret_cast<const float*>(prefill_arenas_.bases[0] + prefill_->schedule().logits_off);
    }
    void copy_kv(uint32_t n_past, size_t k_floats, size_t v_floats) const {
        const uint64_t want = kv_floats(interpreter_->schedule(), n_past);
        if (n_past > ctx_len_) fail("{} positions do not fit the context of {}", n_past, ctx_len_);
        if (k_floats != want || v_floats != want)
            fail("KV copy of {} positions: {} and {} floats given, {} expected", n_past, k_floats, v_floats, want);
    }
    // f(cache offset, host offset, elements) for each (layer, kv head): its first n_past rows of head_dim.
    template <typename F>
    void for_each_row(uint32_t n_past, F&& f) const {
        const ModelDims& d = interpreter_->schedule().dims;
        const size_t rows = size_t(d.n_layers) * d.n_kv_heads, n = size_t(n_past) * d.head_dim;
        for (size_t r = 0; r < rows; ++r) f(r * ctx_len_ * d.head_dim, r * n, n);
    }

    ModelWeights weights_;
    RankArenas arenas_;  // the decode step's activation arena of each rank
    std::vector<float> k_cache_;  // (n_layers, n_kv_heads, ctx_len, head_dim) in dims.kv_type (float-aligned storage)
    std::vector<float> v_cache_;  // (n_layers, n_kv_heads, ctx_len, head_dim) in dims.kv_type (float-aligned storage)
    uint32_t ctx_len_ = 0;
    uint32_t epoch_ = 0;
    uint32_t next_pos_ = 0;
    std::unique_ptr<Interpreter> interpreter_;
    RankArenas prefill_arenas_;  // the prefill schedule's activation arena of each rank
    std::unique_ptr<Interpreter> prefill_;  // null without a prefill schedule
    uint32_t prefill_epoch_ = 0;
    uint32_t last_prefill_ = 0;  // tokens of the last call when it was a prefill (logits() reads its arena), else 0
};

}  // namespace

std::unique_ptr<Program> make_cpu_program(const Model& model, Schedule schedule, const ProgramOptions& options,
                                          std::optional<Schedule> prefill) {
    return std::make_unique<CpuProgram>(model, std::move(schedule), options, std::move(prefill));
}

}  // namespace mk

// A compiled schedule: one in-order instruction stream per SM, the counters they wait on and
// signal, the activation-arena layout, and what it was compiled for (target, model, TP layout).
// A tensor-parallel schedule combines all ranks: tp_size * target.n_sms streams (rank k's are
// [k * n_sms, (k + 1) * n_sms)), rank k's buffers in [k * rank_arena_bytes, (k + 1) * rank_arena_bytes)
// of the arena, dims of one rank's share with the ranks' layers stacked (scheduler/tensor_parallel.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "instructions/op_types.hpp"
#include "scheduler/target.hpp"

namespace mk {

inline constexpr uint32_t kScheduleVersion = 5;  // 2: tensor parallel (tp_size, rank_arena_bytes, link); 3: prefill; 4: kv_type;
                                                 // 5: target tensor_cores

struct CounterInfo {
    std::string name;
    uint32_t step_total = 0;  // the counter's increment per step; targets are relative to epoch * step_total
};

struct BufferInfo {
    std::string name;  // e.g. "x", "q", "attn_out"
    uint64_t offset = 0, bytes = 0;
    std::string layout;  // e.g. "(d_model) fp32"
};

// What the graph lays out and its schedule keeps unchanged (the Graph -> Schedule copy is this base).
struct ScheduleLayout {
    ModelDims dims;  // what the instructions address (tp_rank_dims of the model's)
    uint32_t tp_size = 1;
    uint64_t rank_arena_bytes = 0;  // arena_bytes / tp_size; rank k's buffers are [k, k + 1) times it
    uint32_t n_attn_parts = 1;
    uint32_t n_lm_blocks = 1;
    std::vector<WeightFormat> weights;  // by weight id
    std::vector<BufferInfo> buffers;    // the activation arena
    uint64_t arena_bytes = 0;
    uint32_t logits_off = 0;            // (vocab) fp32 (rank 0's)
    uint32_t token_off = 0;             // (1) i32: the sampled token (rank 0's)
    // A prefill step (scheduler/prefill_graph.cpp) runs a chunk of up to prefill_tokens tokens at once; 0: a decode step.
    uint32_t prefill_tokens = 0;
    uint32_t all_logits = 0;            // prefill: logits of every chunk position (T, vocab), else of its last (vocab)
    uint32_t tokens_off = 0;            // prefill: (T) i32 the chunk's tokens, written by the host before the step
};

struct Schedule : ScheduleLayout {
    Target target;
    uint64_t config_hash = 0;
    std::string policy;
    std::vector<CounterInfo> counters;
    std::vector<std::vector<Instruction>> streams;  // one per SM, in execution order

    uint32_t rank_of_stream(size_t sm) const { return uint32_t(sm / target.n_sms); }
    size_t n_instructions() const {
        size_t n = 0;
        for (const auto& s : streams) n += s.size();
        return n;
    }
};

}  // namespace mk

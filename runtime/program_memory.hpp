// ProgramMemory: the buffers a schedule runs over (arena, weights, KV caches), as every backend and the
// shared schedule validation (runtime/prepare.hpp) see them.
#pragma once
#include <cstdint>

#include "instructions/op_context.hpp"

namespace mk {

// The memory a schedule runs over; the interpreter reads and writes it but does not own it.
struct ProgramMemory {
    uint8_t* arena = nullptr;              // schedule.arena_bytes of activation buffers
    const WeightRef* weights = nullptr;    // schedule.weights.size() entries, by weight id
    void* k_cache = nullptr;               // (n_layers, n_kv_heads, ctx_len, head_dim) in dims.kv_type, or null
    void* v_cache = nullptr;               // (n_layers, n_kv_heads, ctx_len, head_dim) in dims.kv_type, or null
    uint32_t ctx_len = 0;
    const float* rope_inv_freq = nullptr;  // (head_dim / 2) fp32
    // Tensor parallel, optional: tp_size arenas of rank_arena_bytes, each biased by its rank's region start
    // (rank_biased, instructions/device_types.hpp) so the schedule's offsets index it, as separate GPUs would hold them; null: every
    // rank's region is in `arena`.
    uint8_t* const* rank_arenas = nullptr;
};

}  // namespace mk

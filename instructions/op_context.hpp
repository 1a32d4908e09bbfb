// What an op's CPU implementation sees when it runs: the activation arena, weights, KV caches,
// the step's state and its weight tiles (staged through pages in checked mode, in place otherwise).
#pragma once
#include <cstdint>
#include <vector>

#include "instructions/op_types.hpp"
#include "models/quant.hpp"
#include "models/tensor.hpp"

namespace mk {

struct SamplingParams {
    float temperature = 0.0f;     // 0: greedy
    int32_t top_k = 0;            // 0: off
    float top_p = 1.0f;           // 1: off
    float min_p = 0.0f;           // 0: off
    float repeat_penalty = 1.0f;  // 1: off
    int32_t repeat_last_n = 64;
    uint64_t seed = 0;
};

// Set by the host (or the device-side loop) before each step.
struct StepState {
    int32_t token = 0;     // input token of this step
    int32_t pos = 0;       // its position (a prefill step: the chunk's first)
    int32_t n_tokens = 1;  // a prefill step: the chunk's tokens (at most the schedule's T; the arena holds them)
    uint32_t epoch = 0;    // steps completed since the program started (counters are relative to it)
    SamplingParams sampling;
    const int32_t* history = nullptr;  // tokens so far, for the repetition penalty
    int32_t n_history = 0;
    int32_t sampled_token = -1;        // written by the sample op
};

struct WeightRef {
    const uint8_t* data = nullptr;
    DType dtype = DType::F32;
    uint32_t rows = 0, cols = 0;
    uint64_t row_bytes = 0;
    const uint8_t* row(uint32_t r) const { return data + uint64_t(r) * row_bytes; }
};

// Hands an op the bytes of tile t of its page plan. The checked implementation copies each tile
// into a page the instruction owns and fails loudly on any misuse.
class TileReader {
public:
    virtual ~TileReader() = default;
    virtual const uint8_t* tile(uint32_t index) = 0;
    // Bytes between the rows of tile(index): the weight's row stride in place, a row's piece in a page.
    virtual uint64_t pitch(uint32_t index) const = 0;
};

// How the CPU matvec ops take their row dots: exact (fp32 activations, dot_row) or q16 (the input vector
// quantized once per instruction to 16-bit blocks of 32, integer dots where the weight format has them:
// Q8_0, Q4_0, Q4_1; other formats stay exact). q16 is 1.2-1.5x faster decode (1.04-1.57x measured) at
// ~1e-4..7e-4 relative L2 of the logits (bench/RESULTS.md); the GPU backends always take fp32 activations.
enum class CpuDots : uint8_t { exact, q16 };

struct OpContext {
    const ModelDims* dims = nullptr;
    const float* rope_inv_freq = nullptr;  // (head_dim / 2) fp32: angular frequency of each rotary pair
    uint8_t* arena = nullptr;              // activation buffers, addressed by byte offsets from the args
    // Tensor parallel: every rank's arena by rank, each biased by its region's start (rank * rank_arena_bytes)
    // so the schedule's offsets index it; `arena` is this rank's entry. A transfer writes through it.
    uint8_t* const* rank_arenas = nullptr;
    const WeightRef* weights = nullptr;    // indexed by weight id
    void* k_cache = nullptr;               // (n_layers, n_kv_heads, ctx_len, head_dim) in dims->kv_type
    void* v_cache = nullptr;               // (n_layers, n_kv_heads, ctx_len, head_dim) in dims->kv_type
    uint32_t ctx_len = 0;
    StepState* step = nullptr;
    const PagePlan* plan = nullptr;        // this instruction's page plan
    TileReader* tiles = nullptr;
    CpuDots dots = CpuDots::exact;

    float* f32(uint32_t byte_offset) const { return reinterpret_cast<float*>(arena + byte_offset); }
    uint64_t cache_offset(uint32_t layer, uint32_t kv_head) const {
        return (uint64_t(layer) * dims->n_kv_heads + kv_head) * ctx_len * dims->head_dim;
    }
    // Writes element `dim` of one KV head's K (or V) row at `pos`, rounded to the cache's type.
    void store_kv(Space space, uint32_t layer, uint32_t kv_head, int32_t pos, uint32_t dim, float value) const {
        const uint64_t i = cache_offset(layer, kv_head) + uint64_t(pos) * dims->head_dim + dim;
        void* cache = space == Space::k_cache ? k_cache : v_cache;
        if (dims->kv_type == uint32_t(KvType::bf16))
            static_cast<uint16_t*>(cache)[i] = f32_to_bf16(value);
        else
            static_cast<float*>(cache)[i] = value;
    }
    // Rows [begin, end) of one KV head's K (or V) cache as fp32, row t at (t - begin) * head_dim: the cache
    // itself when it stores f32, else the rows widened from bf16 into `widened`.
    const float* kv_rows(Space space, uint32_t layer, uint32_t kv_head, int32_t begin, int32_t end,
                         std::vector<float>& widened) const {
        const uint64_t first = cache_offset(layer, kv_head) + uint64_t(begin) * dims->head_dim;
        const void* cache = space == Space::k_cache ? k_cache : v_cache;
        if (dims->kv_type != uint32_t(KvType::bf16)) return static_cast<const float*>(cache) + first;
        const uint64_t n = end > begin ? uint64_t(end - begin) * dims->head_dim : 0;
        widened.resize(n);
        const uint16_t* rows = static_cast<const uint16_t*>(cache) + first;
        for (uint64_t i = 0; i < n; ++i) widened[i] = bf16_to_f32(rows[i]);
        return widened.data();
    }
};

}  // namespace mk

// What each op's float64 reference and its generated test cases are written against: one instruction's
// whole memory (OpBuffers), the outputs the reference expects (Expected) and a seeded case builder.
// tests/instructions/ runs every case of every op (the reference registry below) on every backend.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "instructions/op_context.hpp"
#include "instructions/registry.hpp"

namespace mk {

// One instruction's memory as a Program would hold it, backend-neutral: a backend runs the instruction on
// it (OpBackend in tests/instructions/), the reference reads it before the run.
struct OpBuffers {
    ModelDims dims;
    uint32_t n_ranks = 1;                       // the arena holds n_ranks regions (a transfer writes a peer's)
    uint64_t rank_arena_bytes = 0;
    std::vector<uint8_t> arena;                 // (n_ranks * rank_arena_bytes) activation buffers, byte offsets
    std::vector<WeightFormat> formats;          // by weight id
    std::vector<std::vector<uint8_t>> weights;  // by weight id: formats[id].rows rows of row_bytes, stored format
    uint32_t ctx_len = 0;
    // (n_layers, n_kv_heads, ctx_len, head_dim) values; with a bf16 cache (dims.kv_type) each is a bf16 value
    // and a backend runs on stored_cache's bits.
    std::vector<float> k_cache, v_cache;
    std::vector<float> rope_inv_freq;           // (head_dim / 2) fp32
    StepState step;
    uint64_t page_bytes = 4096;                 // the target the page plan is made for: small pages, so that
    uint32_t max_pages = 6;                     // a row block streams through the same pages several times (6: a
                                                // pass of MMA tiles, page_plan.hpp; 96-column slices)
    PlanInputs plan_inputs() const { return {formats.data(), page_bytes, max_pages}; }
    uint64_t cache_index(uint32_t layer, uint32_t kv_head, int32_t pos) const {
        return ((uint64_t(layer) * dims.n_kv_heads + kv_head) * ctx_len + uint64_t(pos)) * dims.head_dim;
    }
    // The K (or V) cache as a backend stores it (dims.kv_type: fp32, or bf16 bits), and back after a run.
    std::vector<uint8_t> stored_cache(Space space) const;
    void load_stored_cache(Space space, const uint8_t* bytes);
};

// A bf16 KV store may round a value the other way from the float64 reference's rounding: one bf16 unit in the
// last place, at most 2^-8 of the range's largest value.
inline constexpr double kBf16StoreRel = 1.0 / 256;

// How an expected output is compared: fp32 values within the op's tolerance; an i32 exactly; or an i32
// argmax: any index whose reference score is within tolerance of the best (float rounding may swap near-ties).
enum class Check : uint8_t { real, i32, argmax };

// Values an op writes, as its reference computes them in float64.
struct Expected {
    std::string what;            // e.g. "logits": named in a failure
    Space space = Space::arena;
    uint64_t begin = 0;          // arena: byte offset; KV caches: float index
    std::vector<double> values;  // real: one per fp32; i32: one value; argmax: the scores of indices index_base..
    Check check = Check::real;
    int32_t index_base = 0;
    double extra_rel = 0.0;      // allowed beyond the op's tolerance (kBf16StoreRel for a bf16 KV store)
};

struct OpCase {
    std::string name;  // e.g. "matvec_add Q4_K 48x256 store"
    Instruction ins{};
    OpBuffers buffers;
};

// An op's reference and cases, from its spec (`reference`, `cases`, `tolerance`), one per line of ops.def:
// an op without them does not build.
struct OpReference {
    const char* name;
    std::vector<Expected> (*reference)(const Instruction&, const OpBuffers&);
    std::vector<OpCase> (*cases)(uint64_t seed);
    Tolerance tolerance;
};
const OpReference& op_reference(uint16_t opcode);

// Builds one case's buffers from a seed: every byte of the arena and the caches random and non-zero, so an
// output the op fails to write, or a write outside its accesses, shows.
class CaseBuilder {
public:
    // With n_ranks > 1 each rank's region is rank_bytes; with one, the region is as large as its buffers.
    CaseBuilder(const ModelDims& dims, uint64_t seed, uint32_t n_ranks = 1, uint64_t rank_bytes = 0);
    // Reserves n fp32 values in rank `rank`'s region (256-byte aligned, random in [-scale, scale]); its arena offset.
    uint32_t activation(uint64_t n, float scale = 1.0f, uint32_t rank = 0);
    // A random (rows, cols) weight stored in dtype (values in [-scale, scale], quantized); its weight id.
    uint32_t weight(DType dtype, uint32_t rows, uint32_t cols, float scale = 1.0f);
    // Random KV caches of ctx_len positions for every layer of the dims; RoPE frequencies for base 10000.
    void caches(uint32_t ctx_len);
    // Overwrites the reserved values at arena offset `offset` (for inputs with a structure: sums, indices).
    void fill(uint32_t offset, std::vector<float> values) { fills_.push_back({offset, std::move(values)}); }
    float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
    uint32_t below(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }
    OpBuffers& buffers() { return b_; }
    // The finished case: the arena is sized and filled now, after every reservation.
    OpCase finish(std::string name, const Instruction& ins);

private:
    OpBuffers b_;
    std::mt19937_64 rng_;
    std::vector<uint64_t> used_;  // bytes reserved in each rank's region
    std::vector<std::pair<uint64_t, std::vector<float>>> fills_;  // (arena offset, values) written at finish
};

// Reading OpBuffers in float64, for the references.
std::vector<double> ref_f32(const OpBuffers& b, uint64_t byte_offset, uint64_t n);
std::vector<double> ref_row(const OpBuffers& b, uint32_t weight, uint32_t row);  // dequantized, as stored
double ref_dot(const std::vector<double>& a, const std::vector<double>& b);
// w * x / sqrt(mean(x^2) + eps), w an F32 vector weight.
std::vector<double> ref_rms_norm(const OpBuffers& b, const std::vector<double>& x, uint32_t norm_weight);
// An fp32 output range [begin, begin + 4 n) of the arena.
Expected ref_arena(std::string what, uint64_t byte_offset, std::vector<double> values);
// A K or V cache range at float index `begin` holding `values` as the cache stores them: rounded to bf16 (with
// kBf16StoreRel allowed) when dims.kv_type is bf16.
Expected ref_kv_store(const OpBuffers& b, std::string what, Space space, uint64_t begin, std::vector<double> values);

// The weight formats a matrix op takes (every stored format mk reads).
inline constexpr DType kMatrixFormats[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};

}  // namespace mk

// Types shared by every op's spec and implementation: model dimensions as a schedule records them,
// weight ids, the per-step state, memory regions an op touches, page plans and costs.
#pragma once
#include <cstdint>
#include <vector>

#include "instructions/encoding.hpp"

namespace mk {

enum class Opcode : uint16_t {
#define MK_OP(snake, Pascal) snake,
#include "instructions/ops.def"
#undef MK_OP
    count
};

// How the KV cache stores K and V, a schedule property every backend honours (`--kv-type`). bf16 halves
// attention's cache bytes; K and V are rounded to nearest even when written, read back widened to fp32.
enum class KvType : uint32_t { f32 = 0, bf16 = 1 };
inline constexpr uint32_t kKvTypeCount = 2;
MK_HOST_DEVICE inline uint32_t kv_type_bytes(uint32_t kv_type) { return kv_type == uint32_t(KvType::bf16) ? 2 : 4; }
inline const char* kv_type_name(uint32_t kv_type) { return kv_type == uint32_t(KvType::bf16) ? "bf16" : "f32"; }

// The model dimensions a schedule is compiled for (plain data: it is stored in .mks files).
struct ModelDims {
    uint32_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0, vocab = 0;
    float norm_eps = 1e-5f;
    uint32_t qkv_bias = 0, qk_norm = 0;  // Qwen2 biases, Qwen3 per-head norms
    uint32_t kv_type = 0;                // a KvType: how the KV cache stores K and V (not the model's: the schedule's)
    MK_HOST_DEVICE uint32_t kv_bytes() const { return kv_type_bytes(kv_type); }  // bytes of one cached K or V element
    MK_HOST_DEVICE uint32_t q_dim() const { return n_heads * head_dim; }
    MK_HOST_DEVICE uint32_t kv_dim() const { return n_kv_heads * head_dim; }
    MK_HOST_DEVICE uint32_t group_size() const { return n_heads / n_kv_heads; }
};

// Weight ids: three global tensors, then a fixed set per layer.
enum class GlobalWeight : uint32_t { token_embedding, output_norm, lm_head, count };
// A layer's weights: one id per line of models/layer_weights.def, in its order.
enum class LayerWeight : uint32_t {
#define MK_LAYER_WEIGHT(field, ...) field,
#include "models/layer_weights.def"
#undef MK_LAYER_WEIGHT
    count
};
inline constexpr uint32_t kNoWeight = 0xffffffffu;
inline uint32_t global_weight_id(GlobalWeight w) { return uint32_t(w); }
inline uint32_t layer_weight_id(uint32_t layer, LayerWeight w) {
    return uint32_t(GlobalWeight::count) + layer * uint32_t(LayerWeight::count) + uint32_t(w);
}
inline uint32_t n_weight_ids(uint32_t n_layers) { return uint32_t(GlobalWeight::count) + n_layers * uint32_t(LayerWeight::count); }

// Shape and format of one weight as the schedule expects it (checked against the model at load).
struct WeightFormat {
    uint32_t dtype = 0;  // a DType value
    uint32_t rows = 0, cols = 0;
    uint64_t row_bytes = 0;
    bool present() const { return rows != 0; }
};

// Where an op's memory lives. The arena holds every activation buffer (byte offsets);
// the KV caches are (layer, kv_head, position, head_dim) in the schedule's KvType.
enum class Space : uint8_t { arena, k_cache, v_cache };
// How a KV-cache region depends on the step's position.
// A prefill step runs n_pos positions from pos: at_pos is then rows pos+pos_offset..pos+pos_offset+n_pos-1 (an
// instruction's token block of the chunk), upto_pos rows 0..pos+n_pos-1.
enum class PosMode : uint8_t { none, at_pos, upto_pos };

struct Access {
    Space space = Space::arena;
    // Arena: bytes. KV caches: element slots layer * kv_dim + kv_head * head_dim + d, each slot a
    // column of positions; pos says which positions of those slots (row pos, or rows 0..pos).
    uint64_t begin = 0, end = 0;
    bool write = false;
    PosMode pos = PosMode::none;
    uint32_t n_pos = 1;       // positions of the step (a prefill chunk's T or token block; 1 in a decode step)
    uint32_t pos_offset = 0;  // at_pos: the first position's offset from pos (a token block's first token)
};

// What the op streams through one shared-memory page: a contiguous run of whole weight rows (n_cols 0), or an MMA
// tile, columns [col_begin, col_begin + n_cols) of up to 16 rows, packed n_cols elements apart in the page
// (page_plan.hpp's mma_tiles_plan), one of the pass_tiles tiles of its slice that a consumer holds at once.
// `bytes` is what the page holds.
struct Tile {
    uint32_t weight = kNoWeight;
    uint32_t row_begin = 0, n_rows = 0;
    uint64_t bytes = 0;
    uint32_t col_begin = 0, n_cols = 0;
    uint32_t pass_tiles = 0;
    bool whole_rows() const { return n_cols == 0; }
    // Bytes of one row in the page (an MMA tile's rows are packed), and the tile's first byte within a row.
    uint64_t piece_bytes() const { return whole_rows() || n_rows == 0 ? bytes : bytes / n_rows; }
    // (Block formats: piece_bytes / n_cols is a fraction, 34/32 for Q8_0; col_begin is a whole number of blocks.)
    uint64_t col_byte() const { return whole_rows() ? 0 : piece_bytes() * col_begin / n_cols; }
};

// What a page plan depends on: the weights' formats and the target's pages.
struct PlanInputs {
    const WeightFormat* weights = nullptr;  // indexed by weight id
    uint64_t page_bytes = 0;
    uint32_t max_pages = 0;  // pages one instruction may hold
    bool tensor_cores = true;  // the target runs BF16 prefill ops on tensor cores (MMA tiles, page_plan.hpp)
};

// How an op uses the pages: tiles in load order; tile t lives in page t % n_pages; `release_order`
// lists page slots in the order the op frees them (the next instruction receives them in that order).
struct PagePlan {
    std::vector<Tile> tiles;
    uint32_t n_pages = 0;
    std::vector<uint32_t> release_order;
};

// What an instruction does beyond its accesses in its own rank's memory: the cases the backends, the
// verifier and the simulator treat specially, declared by each op's spec (`effects`), never by opcode.
inline constexpr uint32_t kNoRank = 0xffffffffu;
inline constexpr uint32_t kNoOffset = 0xffffffffu;
struct Effects {
    uint32_t peer_rank = kNoRank;   // its writes land in this rank's memory and its signals bump this rank's counters
    uint32_t token_off = kNoOffset; // it writes the step's sampled token (i32) at this arena offset
    MK_HOST_DEVICE bool writes_peer() const { return peer_rank != kNoRank; }
    MK_HOST_DEVICE bool posts_token() const { return token_off != kNoOffset; }
};

// How close a backend's output must be to the op's float64 reference: |got - want| <= rel * max |want| over
// the output range (or rel, when the range is all zeros). Outputs of one range share a scale (a row block's dots).
struct Tolerance {
    double rel = 0.0;
};

struct Cost {
    uint64_t weight_bytes = 0;  // streamed from global memory once per step
    uint64_t activation_bytes = 0;
    uint64_t flops = 0;
    uint64_t link_bytes = 0;  // sent to another rank (tensor parallel): costed at the link's bandwidth
    // Prefill rows ops: the token columns each weight row meets (the block's), and whether the block follows the
    // row block's first (its rows are the same ones another instruction of the chunk streams: gemm_tiling).
    uint32_t token_columns = 0;
    bool later_token_block = false;
};

}  // namespace mk

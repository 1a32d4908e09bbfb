// The memory an op's device implementation sees, as plain structs the host fills and uploads: weights,
// tiles, per-rank bases and the DeviceOpContext. Host code includes this (never device.cuh), so the
// upload layout and the CPU backend share these types without compiling device code.
#pragma once
#include <cstdint>

#include "instructions/encoding.hpp"
#include "instructions/op_types.hpp"

// The accessors below are device functions under nvcc and plain inline functions elsewhere (the host, the
// emulator), so this header needs no CUDA header.
#if defined(__CUDACC__)
#define MK_DEVICE_TYPES_FN __device__
#else
#define MK_DEVICE_TYPES_FN
#endif

namespace mk {

// One weight as the device holds it: rows padded to kDeviceRowAlign (16) bytes (repacked at
// load) so every tile is a legal bulk copy; vectors (norms, biases) are F32.
struct DeviceWeight {
    const uint8_t* data;
    uint32_t dtype;      // a DType value
    uint32_t rows, cols;
    uint32_t row_bytes;  // padded row stride
};

// One tile of an instruction's page plan, as uploaded: where its bytes come from and what they hold. Whole rows
// (n_cols 0) are one bulk copy; an MMA tile's rows are n_rows copies of piece_bytes(), one per weight row
// (row_bytes apart in the blob), packed in the page.
struct DeviceTile {
    uint64_t src_offset;  // byte offset into the weight blob of the first row's bytes (16-byte aligned)
    uint32_t bytes;       // in the page: a multiple of 16
    uint32_t weight;      // weight id
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t col_begin;   // an MMA tile's columns [col_begin, col_begin + n_cols)
    uint16_t n_cols;      // 0: whole rows
    uint16_t pass_tiles;  // an MMA tile's: the tiles of its slice a consumer holds at once (Tile::pass_tiles)
    MK_HOST_DEVICE bool whole_rows() const { return n_cols == 0; }
    MK_HOST_DEVICE uint32_t piece_bytes() const { return whole_rows() || n_rows == 0 ? bytes : bytes / n_rows; }
};
static_assert(sizeof(DeviceTile) == 32);

// A tile's contiguous pieces, f(blob offset, offset in the page, bytes): whole rows in one, an MMA tile one per row
// (its rows' pieces `row_bytes` apart in the blob, its weight's stride, and packed in the page). The loader's bulk
// copies and the L2 prefetches both go piece by piece.
template <class F>
MK_HOST_DEVICE void for_each_tile_piece(const DeviceTile& tile, uint64_t row_bytes, F&& f) {
    // Whole rows, or an MMA tile whose slice is its rows' whole width: the rows lie back to back, one copy.
    if (tile.whole_rows() || tile.piece_bytes() == row_bytes) return f(tile.src_offset, 0u, tile.bytes);
    const uint32_t piece = tile.piece_bytes();
    for (uint32_t r = 0; r < tile.n_rows; ++r) f(tile.src_offset + r * row_bytes, r * piece, piece);
}

// One tensor-parallel rank's memory as every rank addresses it. The schedule's arena offsets, KV layers and
// counter ids are global over the combined schedule, so the arena and cache bases are biased by the rank's
// first byte and layer (arena - rank * rank_arena_bytes): the same offset indexes the same buffer on any
// rank. Each rank holds a whole counter array and uses the counters it owns (verify's rank check). When all
// ranks share one allocation (the CPU, the kernel-per-op baseline) every entry holds the same bases.
struct RankMemory {
    uint8_t* arena;
    void* k_cache;  // in the schedule's KvType
    void* v_cache;
    uint64_t* counters;
};

// A rank's base as RankMemory (and the CPU's OpContext::rank_arenas) hold it: `own`, its allocation, less
// `region_start` bytes (where its region begins in the combined layout). Integer arithmetic: the biased
// address is never dereferenced below `own`.
template <typename T>
inline T* rank_biased(T* own, uint64_t region_start) {
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(own) - uintptr_t(region_start));
}

struct DeviceOpContext {
    ModelDims dims;
    const float* rope_inv_freq;    // (head_dim / 2) fp32
    uint8_t* arena;                // activation buffers, byte offsets from the args (this rank's)
    const RankMemory* ranks;       // device: by rank; where a transfer writes (on another GPU, over NVLink)
    const DeviceWeight* weights;   // by weight id
    void* k_cache;                 // (n_layers, n_kv_heads, ctx_len, head_dim) in dims.kv_type (f32 or bf16)
    void* v_cache;
    uint32_t ctx_len;
    int32_t pos;                   // the step's position
    int32_t token;                 // the step's input token
    int32_t n_tokens;              // a prefill step: the chunk's tokens (StepState::n_tokens); 1 for decode
    float* scratch;                // team-private shared memory
    uint32_t scratch_floats;

    MK_DEVICE_TYPES_FN float* f32(uint32_t byte_offset) const { return reinterpret_cast<float*>(arena + byte_offset); }
    MK_DEVICE_TYPES_FN uint64_t cache_offset(uint32_t layer, uint32_t kv_head) const {
        return (uint64_t(layer) * dims.n_kv_heads + kv_head) * ctx_len * dims.head_dim;
    }
};

// The team scratch (shared memory) the CUDA backends give an op: the normalized input vector, d_model fp32,
// plus 1024 floats for cross-warp reductions and attention's per-warp partial states (attn_partial splits
// positions over as many warps as have room); at least 3,840 floats (15 KiB), which a prefill pass's staged
// block-format quants need (2,320: token_rows.hpp's kMmaStageFloats) beside its tokens' vectors, and which still fit
// the H200 beside 13 pages and the interpreter's 3 KiB of state (16 KiB are left). The resident kernel gives at
// least this, the baseline exactly.
MK_HOST_DEVICE inline uint64_t op_scratch_bytes(const ModelDims& dims) {
    const uint64_t floats = uint64_t(dims.d_model) + 1024;
    return 4ull * (floats > 3840 ? floats : 3840);
}

// Whole-row (scalar) dots of n RMS-normed token vectors read them once a row; rms_lm_head_rows' team stages them
// normed in its scratch first where they fit the floats every backend guarantees (op_scratch_bytes less the 64
// reduction floats): the n scales (rounded up to 4 floats), then the vectors at a pitch of whole 16-byte words. Read
// from L2 for each row, the prefill LM head of a chunk's last token (972 rows an SM at Llama-3.2-1B's shape on the
// h200 target) was predicted at 193 us against decode's 120.
MK_HOST_DEVICE inline uint32_t normed_stage_offset(uint32_t n) { return (n + 3) / 4 * 4; }
MK_HOST_DEVICE inline uint32_t normed_stage_pitch(uint32_t width) { return (width + 3) / 4 * 4; }
MK_HOST_DEVICE inline bool stage_normed_rows(uint32_t n, uint32_t width, const ModelDims& dims) {
    const uint64_t floats = normed_stage_offset(n) + uint64_t(n) * normed_stage_pitch(width);
    return floats + 64 <= op_scratch_bytes(dims) / 4;
}

}  // namespace mk

// What the prefill ops share: activations of a chunk are (T, width) fp32 row-major, one row per token; a step
// runs the first n_tokens rows (the last chunk of a prompt may be shorter than the compiled T).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "instructions/op_context.hpp"
#include "models/tensor.hpp"

namespace mk {

// A prefill op's token block: tokens [begin, end) of the chunk. An instruction covers (row block x token block),
// as a GEMM tile does: Args carry (tok_begin, tok_count), and tok_count 0 (the default) means through the
// chunk's end, so an Args without a token block covers the whole chunk.
struct TokenBlock {
    uint32_t begin = 0, end = 0;
    MK_HOST_DEVICE uint32_t count() const { return end - begin; }
};
MK_HOST_DEVICE inline TokenBlock token_block(uint32_t tok_begin, uint32_t tok_count, uint32_t n_tok) {
    const uint32_t begin = tok_begin < n_tok ? tok_begin : n_tok;
    const uint32_t end = tok_count == 0 || tok_count > n_tok - begin ? n_tok : begin + tok_count;
    return {begin, end};
}
// The block's tokens a step runs (n_run: the step's tokens): the block cut at n_run, possibly empty.
MK_HOST_DEVICE inline TokenBlock run_token_block(TokenBlock block, uint32_t n_run) {
    const uint32_t end = block.end < n_run ? block.end : n_run;
    return {block.begin < end ? block.begin : end, end};
}

// Columns [begin, begin + n) of rows `tokens` of a (n_tok, width) fp32 buffer at byte offset `off`.
inline void append_token_rows(std::vector<Access>& out, uint64_t off, uint32_t width, uint32_t begin, uint32_t n,
                              TokenBlock tokens, bool write) {
    if (begin == 0 && n == width) {  // whole rows: one range
        out.push_back({Space::arena, off + 4ull * tokens.begin * width, off + 4ull * tokens.end * width, write});
        return;
    }
    for (uint32_t j = tokens.begin; j < tokens.end; ++j) {
        const uint64_t row = off + 4ull * (uint64_t(j) * width + begin);
        out.push_back({Space::arena, row, row + 4ull * n, write});
    }
}

// The device code runs a weight matrix times a block's token columns on tensor cores (mma.sync m16n8k16, bf16
// operands, fp32 accumulate; rows_math.cuh) when the page plan streams the weight in MMA tiles (page_plan.hpp): BF16,
// F16, Q8_0, Q4_0 or Q4_1 weights, and a token block of 8 (one n8 fragment) to kMmaMaxTokens. Else scalar dots on CUDA
// cores. The activations go in as bf16 halves (hi and lo), not f16 ones, whose 5-bit exponent overflows past 65504;
// so F16 weights are split into two bf16 (exact) and take a third product, and the block formats' quants go in as
// bf16 (exact: 8 and 4 bits), each 32-column block's dots then scaled by its rows' scales (Q4_1: plus its rows' mins
// times the block's input sums, a product of the inputs with ones).
inline constexpr uint32_t kMmaMinTokens = 8;
inline constexpr uint32_t kMmaGroupRows = 16;  // the weight rows of an MMA tile: mma.m16n8k16's m
// A warp keeps fp32 accumulators for (the tiles of a pass) x (its 8-token chunks) x 4, at most kMmaAccumulators, for
// at most kMmaMaxChunks chunks; a pass holds at most kMmaMaxPassTiles pages. Registers bound both: the interpreter
// kernel runs every op and used 242 before the MMA code; 64 accumulators, or 4 chunks a warp (their inputs' hi and
// lo halves in flight), spilled. The interpreter has 7 consumer warps and the kernel-per-op baseline 8, so 7 warps'
// chunks bound what a team holds: 1 chunk a warp (56 tokens) in passes of 8 tiles, 2 (112) in passes of 4.
inline constexpr uint32_t kMmaAccumulators = 32;
inline constexpr uint32_t kMmaMaxChunks = 2;
inline constexpr uint32_t kMmaMaxPassTiles = 8;
inline constexpr uint32_t kMmaTeamWarps = 7;
inline constexpr uint32_t kMmaMaxTokens = kMmaTeamWarps * 8 * kMmaMaxChunks;
MK_HOST_DEVICE inline uint32_t mma_chunks_per_warp(uint32_t tokens, uint32_t n_warps) {
    return ((tokens + 7) / 8 + n_warps - 1) / n_warps;
}
// The columns an MMA tile's slices come in: a warp's two k-steps (32); for the block formats, the fewest 32-column
// blocks whose bytes are a multiple of 16, as the loader's bulk copies need: Q8_0 8 x 34 bytes (256 columns), Q4_0
// 8 x 18 (256), Q4_1 4 x 20 (128). 0: the format takes no MMA tiles. A weight whose rows are not whole spans, or
// not 16-byte multiples (SmolLM2's Q4_1 rows: 576 columns, 360 bytes), takes slices of whole rows instead: a tile's
// 16 rows are then one contiguous copy (page_plan.cpp's mma_slice_cols).
MK_HOST_DEVICE inline uint32_t mma_span_cols(uint32_t dtype) {
    if (dtype == uint32_t(DType::BF16) || dtype == uint32_t(DType::F16)) return 32;
    if (dtype == uint32_t(DType::Q8_0) || dtype == uint32_t(DType::Q4_0)) return 256;
    return dtype == uint32_t(DType::Q4_1) ? 128 : 0;
}
// Whether a weight's rows come in whole spans of 16-byte pieces (else only whole-row slices).
MK_HOST_DEVICE inline bool mma_spans_fit(uint32_t dtype, uint32_t cols, uint64_t row_bytes) {
    const uint32_t span = mma_span_cols(dtype);
    return span && cols % span == 0 && row_bytes % 16 == 0;
}
MK_HOST_DEVICE inline bool mma_eligible(uint32_t dtype, uint32_t cols, uint32_t block_tokens) {
    return mma_span_cols(dtype) && cols % 32 == 0 && block_tokens >= kMmaMinTokens && block_tokens <= kMmaMaxTokens;
}
// The block formats' quants are made bf16 once per team, not once per warp: each 32-column block of a pass's tiles
// goes into the scratch's last floats (rows_math.cuh's stage_block), 16 rows x 32 bf16 and each row's scale and min
// in fp32, 1,152 bytes a tile, 9 KiB for a pass of 8 (device_prefill_limit keeps them clear of the tokens' vectors).
inline constexpr uint32_t kMmaStageTileBytes = kMmaGroupRows * (32 * 2 + 2 * 4);
inline constexpr uint32_t kMmaStageFloats = 16 + kMmaMaxPassTiles * kMmaStageTileBytes / 4;  // + 8 pages' addresses
MK_HOST_DEVICE inline bool mma_block_format(uint32_t dtype) {
    return dtype == uint32_t(DType::Q8_0) || dtype == uint32_t(DType::Q4_0) || dtype == uint32_t(DType::Q4_1);
}
// The MMAs a k-step issues per tile and 8-token chunk: the input's hi and lo halves, and for F16 weights their low
// half against the input's high one (rows_math.cuh's mma_weight_step). Q4_1's input sums take 4 more a 32-column
// block per chunk, shared by the pass's tiles (not counted here).
MK_HOST_DEVICE inline uint32_t mma_products(uint32_t dtype) { return dtype == uint32_t(DType::F16) ? 3 : 2; }

// The tokens this step runs: the chunk's, at most the compiled n_tok.
inline uint32_t step_tokens(const StepState& step, uint32_t n_tok) {
    return uint32_t(std::clamp<int32_t>(step.n_tokens, 0, int32_t(n_tok)));
}

}  // namespace mk

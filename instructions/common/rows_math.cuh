// Device helpers the prefill (rows) ops share: a chunk's activations are (T, width) fp32 rows, one per token
// (token_rows.hpp); each weight tile is acquired once and every one of its rows is dotted with all the step's
// tokens before it is released, so a chunk reads its weights once. MMA tiles (BF16, F16, Q8_0, Q4_0, Q4_1; page_plan.hpp) run on
// tensor cores (mma.sync m16n8k16, bf16 operands); whole-row tiles take scalar fp32 dots (row_dot) for every format.
#pragma once
#include "instructions/common/device_math.cuh"
#include "instructions/common/ptx.cuh"
#include "instructions/common/token_rows.hpp"

namespace mk::dev {

// The tokens a prefill step runs: the chunk's, at most the compiled n_tok (as token_rows.hpp's step_tokens).
__device__ inline uint32_t step_tokens(const DeviceOpContext& ctx, uint32_t n_tok) {
    return ctx.n_tokens < 0 ? 0u : min(uint32_t(ctx.n_tokens), n_tok);
}

// One token's row of a (T, width) fp32 buffer. Rows past the first are 16-byte aligned only when width is a
// multiple of 4, so values are read one by one.
struct TokenVector {
    const float* x;
    __device__ float4 load4(uint32_t i) const { return {x[i], x[i + 1], x[i + 2], x[i + 3]}; }
    __device__ float at(uint32_t i) const { return x[i]; }
    __device__ void prefetch(uint32_t i) const { ptx::prefetch_l1(x + i); }  // value i's line into L1
};

// One token's residual row RMS-normed as it is read: w[i] * (x[i] * scale), rounded as rms_norm rounds it.
struct NormedVector {
    const float* x;
    const float* w;
    float scale;
    __device__ float at(uint32_t i) const { return w[i] * (x[i] * scale); }
    __device__ float4 load4(uint32_t i) const { return {at(i), at(i + 1), at(i + 2), at(i + 3)}; }
    // x's line and w's into L1 (w's too: a pass streams ~450 KiB of rows through L1 before it reads w's line again).
    __device__ void prefetch(uint32_t i) const {
        ptx::prefetch_l1(x + i);
        ptx::prefetch_l1(w + i);
    }
};

// scales[j] = 1 / sqrt(mean(x_j^2) + eps) for the n rows of a (n, width) fp32 buffer, one warp per row (the root
// in double, as rms_norm); ends with a sync so every thread sees them.
__device__ inline void rms_scales(const float* x, uint32_t width, uint32_t n, float eps, float* scales, const Team& team) {
    for (uint32_t j = team.warp(); j < n; j += team.n_warps()) {
        const float* row = x + uint64_t(j) * width;
        float sum_sq = 0.0f;
        for (uint32_t i = team.lane(); i < width; i += 32) sum_sq += row[i] * row[i];
        sum_sq = warp_sum(sum_sq);
        if (team.lane() == 0) scales[j] = float(1.0 / sqrt(double(sum_sq) / width + eps));
    }
    team.sync();
}

// x = hi + lo as two bf16 values (hi rounded to nearest, lo the remainder rounded), for a pair of values packed as
// MMA fragments take them: the weight's two exact products with them keep the dot within ~2^-17 of fp32 per element,
// where x in one bf16 would lose 2^-9. Six instructions a pair (two conversions of two values each).
__device__ inline void split_bf16_pair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    hi = ptx::bf16x2_rn(x0, x1);
    lo = ptx::bf16x2_rn(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}

// Two floats that bf16 holds exactly (quants, an F16 weight's halves), packed as a bf16 pair by their high halves: no
// conversion instruction. Conversions (I2F, F2FP) issue at 16 lanes a clock an SM, an eighth of fp32 adds (the CUDA
// guide's throughput table), which would bound the weights' unpacking; shifts, logic ops and adds do not.
__device__ inline uint32_t exact_bf16x2(float lo, float hi) {
    return __float_as_uint(lo) >> 16 | (__float_as_uint(hi) & 0xffff0000u);
}

// An fp32 rounded to bf16's 8 significant bits (half away from zero) by an integer add on its bits (a carry into the
// exponent is the next binade): no conversion instruction.
__device__ inline float round_to_bf16(float x) { return __uint_as_float((__float_as_uint(x) + 0x8000u) & 0xffff0000u); }

// Two F16 weights (a 32-bit pair) as bf16 pairs hi + lo, exactly: an f16's 11 significant bits are bf16's 8 (hi,
// rounded) plus a remainder of at most 3 (lo = x - hi, exact in fp32 and in bf16; both exponents in bf16's range,
// subnormals included). Rounded, not truncated: |lo| <= 2^-8 |w| keeps the w_lo x_lo product that mma_weight_step
// leaves out within 2^-16 of the product (truncation doubles it: an F16 gate/up op case then missed its tolerance).
__device__ inline void split_f16_pair(uint32_t w, uint32_t& hi, uint32_t& lo) {
    const float2 f = half2_bits_to_f2(w);
    const float h0 = round_to_bf16(f.x), h1 = round_to_bf16(f.y);
    hi = exact_bf16x2(h0, h1);
    lo = exact_bf16x2(f.x - h0, f.y - h1);
}

// The weight formats MMA tiles take (token_rows.hpp's mma_eligible).
enum class MmaWeights { bf16, f16, q8_0, q4_0, q4_1 };

// Eight Q8_0 quants (2-byte aligned in the block) as four bf16 pairs, exactly, with no integer conversion: the byte
// with its sign bit flipped (q + 128) in an fp32's low bits above 2^23, less 2^23 + 128, is q.
__device__ inline uint4 q8_bf16_pairs(const uint8_t* q) {
    uint32_t out[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t two = load_u16(q + 2 * k);
        out[k] = exact_bf16x2(__uint_as_float((two & 0xffu) ^ 0x4b000080u) - 8388736.0f,
                              __uint_as_float((two >> 8) ^ 0x4b000080u) - 8388736.0f);
    }
    return {out[0], out[1], out[2], out[3]};
}

// Eight Q4 quants, a lane's 8 columns of a block (the nibbles at `shift` of its quant bytes b..b+7: lo4 holds bytes
// b..b+3, hi4 b+4..b+7), as four bf16 pairs less `offset` (Q4_0's 8), exactly: the quant in an fp32's low bits
// above 2^23 (q + 2^23), less 2^23 + offset, is q - offset with no rounding; 7 instructions a pair, no conversion.
__device__ inline uint4 q4_bf16_pairs(uint32_t lo4, uint32_t hi4, uint32_t shift, float offset) {
    uint32_t out[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t two = (k < 2 ? lo4 : hi4) >> (16 * (k % 2) + shift);
        const float bias = 8388608.0f + offset;
        out[k] = exact_bf16x2(__uint_as_float(0x4b000000u | (two & 15u)) - bias,
                              __uint_as_float(0x4b000000u | (two >> 8 & 15u)) - bias);
    }
    return {out[0], out[1], out[2], out[3]};
}

// The bytes of one 32-column block of a block format: Q8_0 34 (an f16 scale, 32 int8), Q4_0 18 (a scale, 16 quant
// bytes; value scale * (q - 8)), Q4_1 20 (a scale, a min, 16 quant bytes; value scale * q + min).
__device__ inline uint32_t mma_block_bytes(MmaWeights kind) {
    return kind == MmaWeights::q8_0 ? 34 : kind == MmaWeights::q4_1 ? 20 : 18;
}

// A lane's columns 8t..8t+7 of one block (its first byte at `block`) as four bf16 pairs of its quants, exactly. A Q4
// column c < 16 is the low nibble of quant byte c, c >= 16 the high one of byte c - 16: this lane's are the nibbles
// 4 (t / 2) of bytes 8 (t % 2)...
__device__ inline uint4 block_bf16_pairs(MmaWeights kind, const uint8_t* block, uint32_t t) {
    if (kind == MmaWeights::q8_0) return q8_bf16_pairs(block + 2 + 8 * t);
    const bool q4_1 = kind == MmaWeights::q4_1;
    const uint8_t* q = block + (q4_1 ? 4 : 2) + 8 * (t % 2);
    return q4_bf16_pairs(load_u32_align2(q), load_u32_align2(q + 4), 4 * (t / 2), q4_1 ? 0.0f : 8.0f);
}

// d += A . B on one k-step for an A of bf16 weights (2 products: the input's halves) or of F16 weights split as above
// (3: w_hi x_hi, w_hi x_lo, w_lo x_hi; w_lo x_lo is within 2^-16 of the product and left out). `f16` is the same for
// the whole warp.
__device__ inline void mma_weight_step(float (&d)[4], const uint32_t (&a)[4], uint32_t hi0, uint32_t hi1, uint32_t lo0,
                                       uint32_t lo1, bool f16) {
    if (!f16) {
        ptx::mma_m16n8k16_bf16(d, a, {hi0, hi1}, d);
        ptx::mma_m16n8k16_bf16(d, a, {lo0, lo1}, d);
    } else {
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (uint32_t r = 0; r < 4; ++r) split_f16_pair(a[r], a_hi[r], a_lo[r]);
        ptx::mma_m16n8k16_bf16(d, a_hi, {hi0, hi1}, d);
        ptx::mma_m16n8k16_bf16(d, a_hi, {lo0, lo1}, d);
        ptx::mma_m16n8k16_bf16(d, a_lo, {hi0, hi1}, d);
    }
}

// Where a pass stages its block formats' quants: the scratch's last kMmaStageFloats (16-byte aligned), which the
// tokens' vectors at its start never reach (the CUDA programs bound a chunk's tokens so: device_prefill_limit).
__device__ inline float* weight_stage(const DeviceOpContext& ctx) {
    return ctx.scratch + (ctx.scratch_floats - kMmaStageFloats) / 4 * 4;
}

// Where a pass of at most kTiles tiles stages a block (token_rows.hpp's kMmaStageFloats), at offsets fixed at compile
// time so a reader holds one pointer: the pass's page addresses, the rows' scales in fp32 (row r of tile i at
// 16 i + r), Q4_1's mins, then the quants, row 16 i + r as 64 bytes of bf16: four 16-byte pieces of 8 columns in a
// lane's order (block_bf16_pairs). All 16-byte aligned.
template <uint32_t kTiles>
struct BlockStage {
    static constexpr uint32_t kTable = 0, kScales = 16, kMins = kScales + kTiles * kMmaGroupRows,  // in floats
        kQuants = kMins + kTiles * kMmaGroupRows;
};

// One 32-column block (the `block`-th) of a pass's `count` tiles (their pages in the stage's table), unpacked by the
// whole team into the stage; a missing row is zeros. Between two team syncs: no warp still reads the last block, and
// every warp sees this one. 64 pieces a tile over the team (224 threads: 2.3 each for 8 tiles).
template <uint32_t kTiles>
__device__ inline void stage_block(MmaWeights kind, uint32_t count, uint32_t full_tiles, uint32_t last_rows,
                                   uint32_t pitch, uint32_t block, float* stage, const Team& team) {
    const uint8_t* const* table = reinterpret_cast<const uint8_t* const*>(stage + BlockStage<kTiles>::kTable);
    uint4* quants = reinterpret_cast<uint4*>(stage + BlockStage<kTiles>::kQuants);
    float* scales = stage + BlockStage<kTiles>::kScales;
    float* mins = stage + BlockStage<kTiles>::kMins;
    team.sync();
    for (uint32_t u = team.rank; u < count * kMmaGroupRows * 4; u += team.size) {
        const uint32_t i = u / 64, row = u / 4 % kMmaGroupRows, piece = u % 4;
        const bool have = row < (i < full_tiles ? kMmaGroupRows : last_rows);
        const uint8_t* b = table[i] + mma_block_bytes(kind) * block + row * pitch;
        quants[u] = have ? block_bf16_pairs(kind, b, piece) : uint4{0, 0, 0, 0};
        if (piece == 0) scales[u / 4] = have ? f16_to_f32(load_u16(b)) : 0.0f;
        if (piece == 1 && kind == MmaWeights::q4_1) mins[u / 4] = have ? f16_to_f32(load_u16(b + 2)) : 0.0f;
    }
    team.sync();
}

// The tensor-core dots of an MMA tile plan (page_plan.hpp): visit(tile, row, j, dot) for every weight row and token
// j < n, called by the lane that holds the dot. A pass's groups (16 rows each; gate/up pairs) go slice by slice: the
// team holds the pass's tiles of one slice (Tile::pass_tiles, at most kTiles); a warp keeps fp32 accumulators for its
// 8-token chunks (chunk w, w + n_warps, ...: at most kChunks) over every slice, so each activation is read once a
// pass. Weights are A (16 rows x 16 k, from the page, F16 split in two; a block format's quants from `stage`, the team
// unpacking each block once), tokens B (16 k x 8 tokens, hi and lo halves: two MMAs, three for F16:
// mma_weight_step). Within
// each 32 columns a lane takes 8 consecutive ones (one 128-bit load a row) and feeds them to the two k-steps in a
// permuted k order, the same for A and B, which leaves the dot unchanged: step 0 takes columns 8t..8t+3 as the
// fragment's k = 2t, 2t+1, 2t+8, 2t+9, step 1 columns 8t+4..8t+7 (t = lane % 4; mk_emu/mma.hpp spells the layout).
template <uint32_t kTiles, uint32_t kChunks, class Tiles, class Column, class Visit>
__device__ inline void mma_row_token_dots(const DeviceOpContext& ctx, const Team& team, Tiles& tiles, uint32_t n,
                                          uint32_t cols, Column&& column, Visit&& visit) {
    // The format, a branch the same for the whole team: instances per format made the ops' code too big to inline.
    const DType dtype = DType(ctx.weights[tiles.info(0).weight].dtype);
    const MmaWeights kind = dtype == DType::F16    ? MmaWeights::f16
                            : dtype == DType::Q8_0 ? MmaWeights::q8_0
                            : dtype == DType::Q4_0 ? MmaWeights::q4_0
                            : dtype == DType::Q4_1 ? MmaWeights::q4_1
                                                   : MmaWeights::bf16;
    const uint32_t lane = team.lane(), g = lane / 4, t = lane % 4, warp = team.warp(), n_warps = team.n_warps();
    const uint32_t chunks = (n + 7) / 8;
    const bool blocks = mma_block_format(uint32_t(dtype));
    for (uint32_t base = 0; base < tiles.count();) {
        // The plan's pass width: at most kTiles, as page_plan.cpp's mma_pass_tiles sizes it for >= 7 warps.
        const uint32_t in_pass = tiles.info(base).pass_tiles;
        const uint32_t n_slices = (cols + tiles.info(base).n_cols - 1) / tiles.info(base).n_cols;
        float acc[kTiles][kChunks][4] = {};
        for (uint32_t s = 0; s < n_slices; ++s) {
            const uint32_t t0 = base + s * in_pass;
            // Registers are short (the interpreter kernel runs every op): the slice's tiles share a pitch (the same
            // columns of weights of one shape), and only the pass's last group (its last n_weights tiles) may have
            // fewer than 16 rows.
            const uint8_t* page[kTiles] = {};
#pragma unroll
            for (uint32_t i = 0; i < kTiles; ++i)
                if (i < in_pass) page[i] = tiles.acquire(t0 + i);
            const DeviceTile& first = tiles.info(t0);
            const uint32_t pitch = tiles.pitch(t0, ctx.weights[first.weight].row_bytes);
            const uint32_t last_rows = tiles.info(t0 + in_pass - 1).n_rows;
            const uint32_t full_tiles = in_pass - (in_pass > 1 && tiles.info(t0 + 1).weight != first.weight ? 2 : 1);
            const uint32_t col0 = first.col_begin, width = first.n_cols;
            // Chunk c's token columns k0 + 8t..8t+7 as bf16 pairs (hi and lo): false for a warp with no chunk c.
            // Registers for one chunk's B at a time beside the accumulators. The lane's columns kAhead k-steps on
            // (past a slice's last, the next slice's first) go to L1 while this k-step's MMAs issue, and at the
            // pass's first k-step those of every k-step up to there: without, each k-step's loads waited an L2 round
            // trip, hidden only by the other warp on the same scheduler (device_cost.cpp's mma_k_step_ns; the 1B
            // shape's 512-token prefill predicted 8.52 ms without, 7.91 with). Two k-steps ahead where a warp has
            // one chunk (7 warps' lines of 3 k-steps: 21 KiB of the ~28 KiB of L1 beside the pages), else one (2
            // chunks' lines of 2 k-steps: 28 KiB, at L1's size: some may be evicted before they are read).
            constexpr uint32_t kAhead = kChunks == 1 ? 2 : 1;  // KernelStructure::mma_prefetch_k_steps
            auto chunk_inputs = [&](uint32_t c, uint32_t k0, uint32_t(&hi)[4], uint32_t(&lo)[4]) {
                if (warp + c * n_warps >= chunks) return false;  // the same for the whole warp
                const uint32_t j = (warp + c * n_warps) * 8 + g;
                const auto x = column(j < n ? j : 0);
                if (j < n) {
                    const uint32_t col = col0 + k0;
#pragma unroll
                    for (uint32_t a = col == 0 ? 1 : kAhead; a <= kAhead; ++a)
                        if (col + 32 * a < cols) x.prefetch(col + 32 * a + 8 * t);
                }
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    hi[e] = lo[e] = 0;
                    if (j < n)
                        split_bf16_pair(x.at(col0 + k0 + 8 * t + 2 * e), x.at(col0 + k0 + 8 * t + 2 * e + 1), hi[e],
                                        lo[e]);
                }
                return true;
            };
            if (blocks) {
                // A block format: each 32-column block's quants unpacked once for the team into the free scratch
                // (stage_block; a warp unpacking them for its own tokens did it 7 times; the CUDA programs keep room
                // for a pass's: device_prefill_limit), its dots on the tensor cores, then weighted by the rows'
                // scales (Q4_1: plus their mins times the block's input sums). The pages' addresses go to the stage
                // so this loop holds none in registers (one loop for every format spilled in the interpreter, as did
                // staging in rounds of what fits: the accumulators' indices stopped being constants).
                float* stage = weight_stage(ctx);  // here, not held through the other formats' loop
                const uint8_t** table = reinterpret_cast<const uint8_t**>(stage + BlockStage<kTiles>::kTable);
#pragma unroll
                for (uint32_t i = 0; i < kTiles; ++i)
                    if (i < in_pass && team.rank == i) table[i] = page[i];  // seen after stage_block's first sync
                // This lane's rows g and g + 8 of tile 0 in the stage (128-bit loads, no bank conflict); tile i's are
                // constant offsets further, which the loads take as immediates (indices computed per tile held 16
                // registers, and the interpreter spilled).
                const uint4* lane_quants =
                    reinterpret_cast<const uint4*>(stage + BlockStage<kTiles>::kQuants) + g * 4 + t;
                const float* lane_scales = stage + BlockStage<kTiles>::kScales + g;
                for (uint32_t k0 = 0; k0 < width; k0 += 32) {
                    stage_block<kTiles>(kind, in_pass, full_tiles, last_rows, pitch, k0 / 32, stage, team);
#pragma unroll
                    for (uint32_t c = 0; c < kChunks; ++c) {
                        uint32_t hi[4], lo[4];
                        if (!chunk_inputs(c, k0, hi, lo)) continue;
                        // Q4_1: the block's input sums (rows g and g + 8 alike), for its rows' mins: the inputs
                        // times ones.
                        float sums[4] = {};
                        if (kind == MmaWeights::q4_1) {
                            const uint32_t ones[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};  // 1.0 x 2
                            mma_weight_step(sums, ones, hi[0], hi[1], lo[0], lo[1], false);
                            mma_weight_step(sums, ones, hi[2], hi[3], lo[2], lo[3], false);
                        }
#pragma unroll
                        for (uint32_t i = 0; i < kTiles; ++i) {
                            if (i >= in_pass) continue;
                            const uint4 q0 = lane_quants[i * 64], q1 = lane_quants[i * 64 + 32];
                            const uint32_t a0[4] = {q0.x, q1.x, q0.y, q1.y}, a1[4] = {q0.z, q1.z, q0.w, q1.w};
                            float q[4] = {};
                            mma_weight_step(q, a0, hi[0], hi[1], lo[0], lo[1], false);
                            mma_weight_step(q, a1, hi[2], hi[3], lo[2], lo[3], false);
                            float(&d)[4] = acc[i][c];
                            const float s0 = lane_scales[i * 16], s1 = lane_scales[i * 16 + 8];
                            if (kind == MmaWeights::q4_1) {
                                constexpr uint32_t kMins = BlockStage<kTiles>::kMins - BlockStage<kTiles>::kScales;
                                const float m0 = lane_scales[kMins + i * 16], m1 = lane_scales[kMins + i * 16 + 8];
                                d[0] += s0 * q[0] + m0 * sums[0], d[1] += s0 * q[1] + m0 * sums[1];
                                d[2] += s1 * q[2] + m1 * sums[2], d[3] += s1 * q[3] + m1 * sums[3];
                            } else {
                                d[0] += s0 * q[0], d[1] += s0 * q[1], d[2] += s1 * q[2], d[3] += s1 * q[3];
                            }
                        }
                    }
                }
            } else {
                // BF16 or F16 rows straight from the pages: tile i's rows g and g + 8, one 128-bit load each.
                for (uint32_t k0 = 0; k0 < width; k0 += 32) {
#pragma unroll
                    for (uint32_t c = 0; c < kChunks; ++c) {
                        uint32_t hi[4], lo[4];
                        if (!chunk_inputs(c, k0, hi, lo)) continue;
#pragma unroll
                        for (uint32_t i = 0; i < kTiles; ++i) {
                            if (i >= in_pass) continue;
                            const uint32_t rows = i < full_tiles ? kMmaGroupRows : last_rows;
                            const uint4 zero{0, 0, 0, 0};
                            const uint8_t* p = page[i] + 2 * (k0 + 8 * t);
                            const uint4 r0 = g < rows ? *reinterpret_cast<const uint4*>(p + g * pitch) : zero;
                            const uint4 r1 = g + 8 < rows ? *reinterpret_cast<const uint4*>(p + (g + 8) * pitch) : zero;
                            const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y}, a1[4] = {r0.z, r1.z, r0.w, r1.w};
                            mma_weight_step(acc[i][c], a0, hi[0], hi[1], lo[0], lo[1], kind == MmaWeights::f16);
                            mma_weight_step(acc[i][c], a1, hi[2], hi[3], lo[2], lo[3], kind == MmaWeights::f16);
                            __syncwarp();  // one tile's registers at a time: interleaved, the interpreter spilled
                        }
                    }
                }
            }
#pragma unroll
            for (uint32_t i = 0; i < kTiles; ++i)
                if (i < in_pass) tiles.release(t0 + i);
        }
        // The accumulator fragment: this lane holds rows g, g + 8 of each tile for tokens 2t, 2t + 1 of each chunk.
        // One tile at a time, the next ones shifted down: one inlined copy of the visit, not kTiles (registers).
#pragma unroll 1
        for (uint32_t i = 0; i < in_pass; ++i) {
            const DeviceTile& tile = tiles.info(base + i);
#pragma unroll
            for (uint32_t c = 0; c < kChunks; ++c)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    const uint32_t r = g + 8 * (e / 2), j = (warp + c * n_warps) * 8 + 2 * t + e % 2;
                    if (r < tile.n_rows && j < n) visit(tile, tile.row_begin + r, j, acc[0][c][e]);
                }
#pragma unroll
            for (uint32_t k = 0; k + 1 < kTiles; ++k)
#pragma unroll
                for (uint32_t c = 0; c < kChunks; ++c)
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) acc[k][c][e] = acc[k + 1][c][e];
        }
        base += n_slices * in_pass;
    }
}

// Whole rows: each warp's rows as for_each_warp_row deals them, all n tokens of a row before the next.
template <class Tiles, class Column, class Visit>
__device__ inline void for_each_whole_row_token_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles,
                                                    uint32_t n, uint32_t cols, Column&& column, Visit&& visit) {
    for_each_warp_row(ctx, team, tiles,
                      [&](const DeviceTile& tile, uint32_t row, const uint8_t* bytes, const DeviceWeight& w) {
                          for (uint32_t j = 0; j < n; ++j) {
                              const float dot = row_dot(w.dtype, bytes, column(j), cols, team.lane());
                              if (team.lane() == 0) visit(tile, row, j, dot);
                          }
                      });
}

// Calls visit(tile, row, j, dot) for every weight row of every tile and every token j < n, dot = row . column(j)
// (a vector view), in the one lane that holds it. MMA tiles take the tensor cores (mma_row_token_dots); whole rows
// are dealt as for_each_warp_row deals them (a row of paired gate/up tiles falls to the same warp), a warp finishing
// all tokens of a row before the next. Either way a token's gate dot is visited before its up dot, in the same lane,
// and every warp acquires and releases every tile even when n is 0 (the page ring's contract).
template <class Tiles, class Column, class Visit>
__device__ inline void for_each_row_token_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles, uint32_t n,
                                              uint32_t cols, Column&& column, Visit&& visit) {
    if (tiles.count() && !tiles.info(0).whole_rows()) {
        // The page plan's passes hold 8 tiles where 7 warps need 1 chunk each, else 4 for 2 (page_plan.cpp).
        // Teams have >= kMmaTeamWarps warps and n <= the block the plan was made for, so neither shape is exceeded.
        constexpr uint32_t kPairTiles = kMmaAccumulators / 4 / kMmaMaxChunks;
        if (mma_chunks_per_warp(n, team.n_warps()) <= 1)
            return mma_row_token_dots<kMmaMaxPassTiles, 1>(ctx, team, tiles, n, cols, column, visit);
        return mma_row_token_dots<kPairTiles, kMmaMaxChunks>(ctx, team, tiles, n, cols, column, visit);
    }
    for_each_whole_row_token_dot(ctx, team, tiles, n, cols, column, visit);
}

// The same with column j = token j's residual row (x: (n, width) fp32) RMS-normed with the F32 weight `norm`: the
// tokens' scales first, in the vector scratch (n floats). Whole rows read their columns once a row: with
// `may_stage` (an op that keeps nothing else in the scratch: rms_lm_head_rows) the normed vectors are staged after
// the scales where they fit (stage_normed_rows, device_types.hpp), rounded as NormedVector rounds them.
template <class Tiles, class Visit>
__device__ inline void for_each_row_normed_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles,
                                               const float* x, uint32_t norm, uint32_t width, uint32_t n, Visit&& visit,
                                               bool may_stage = false) {
    const float* w = reinterpret_cast<const float*>(ctx.weights[norm].data);
    float* scales = vector_scratch(ctx);  // (n) fp32
    rms_scales(x, width, n, ctx.dims.norm_eps, scales, team);
    if (may_stage && tiles.count() && tiles.info(0).whole_rows() && stage_normed_rows(n, width, ctx.dims)) {
        float* staged = scales + normed_stage_offset(n);  // 16-byte aligned, as the scratch and the offset are
        const uint32_t pitch = normed_stage_pitch(width);
        for (uint32_t u = team.rank; u < n * width; u += team.size) {
            const uint32_t j = u / width, i = u % width;
            staged[j * pitch + i] = w[i] * (x[uint64_t(j) * width + i] * scales[j]);
        }
        team.sync();
        for_each_whole_row_token_dot(ctx, team, tiles, n, width,
                                     [&](uint32_t j) { return PlainVector{staged + j * pitch}; }, visit);
        return;
    }
    for_each_row_token_dot(
        ctx, team, tiles, n, width, [&](uint32_t j) { return NormedVector{x + uint64_t(j) * width, w, scales[j]}; },
        visit);
}

}  // namespace mk::dev

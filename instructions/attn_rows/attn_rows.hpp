// attn_rows (prefill): causal attention of a block of the chunk's queries for one KV head's group of query
// heads: query j (position pos + j) over cache rows 0..pos+j, which hold the earlier chunks and this one's
// keys up to itself. Softmax in one pass per query (no partials: a chunk has enough queries to spread).
#pragma once
#include "instructions/common/token_rows.hpp"
#include "instructions/registry.hpp"

namespace mk {

struct AttnRowsArgs {
    uint32_t layer;
    uint32_t kv_head;
    uint32_t q_begin;   // first query (token) of the block
    uint32_t n_q;       // queries in the block
    uint32_t q_off;     // (n_tok, n_heads, head_dim) fp32 queries
    uint32_t out_off;   // (n_tok, n_heads, head_dim) fp32 attention outputs
    uint32_t head_dim;
    uint32_t group;     // query heads per KV head
    uint32_t n_tok;     // the compiled chunk size T
    uint32_t q2_begin;  // a second block of queries, [q2_begin, q2_begin + n_q2), after the first; n_q2 0: none
    uint32_t n_q2;
};

// An instruction's query blocks, in order: causal work grows with a query's index, so the scheduler pairs an early
// block with a late one and every instruction of a chunk gets about the same positions to read.
struct QueryBlock {
    uint32_t begin, count;
};
MK_HOST_DEVICE inline QueryBlock attn_query_block(const AttnRowsArgs& a, uint32_t i) {
    return i == 0 ? QueryBlock{a.q_begin, a.n_q} : QueryBlock{a.q2_begin, a.n_q2};
}
inline constexpr uint32_t kAttnQueryBlocks = 2;
// "[q_begin, q_begin + n_q)", and " and [...)" for a second block: how describe, errors and test cases name them.
std::string attn_query_blocks_text(const AttnRowsArgs& a);

// How the device walks an instruction (attn_rows.cuh), which its cost model (scheduler/device_cost.cpp) follows: a
// block's (query, head) pairs go kAttnRowsSlots to a warp, a round being one of each warp's loads; a round's visible
// positions are staged in shared memory kAttnRowsBlockPositions at a time, K row t at t * k_pitch (odd: lane t's
// loads of one dim fall in 32 different banks) and V row t at v_off + t * pass_dims; K and V at once where at least
// kAttnRowsMinJointPositions fit (two barriers a block), else in turn in the same floats (four): head_dim 64 stages
// 31 positions at once in the H200's 16 KiB, head_dim 128 31 in turn.
inline constexpr uint32_t kAttnRowsSlots = 4;
inline constexpr uint32_t kAttnRowsBlockPositions = 32;
inline constexpr uint32_t kAttnRowsMinJointPositions = 24;
struct AttnRowsStage {
    uint32_t positions, k_pitch, v_off;
    bool joint;
};
MK_HOST_DEVICE inline AttnRowsStage attn_rows_stage(uint32_t head_dim, uint32_t pass_dims, uint32_t scratch_floats) {
    const uint32_t k_pitch = head_dim | 1, joint = scratch_floats / (k_pitch + pass_dims);
    if (joint >= kAttnRowsMinJointPositions) {
        const uint32_t positions = joint < kAttnRowsBlockPositions ? joint : kAttnRowsBlockPositions;
        return {positions, k_pitch, positions * k_pitch, true};
    }
    const uint32_t positions = scratch_floats / k_pitch;
    return {positions < kAttnRowsBlockPositions ? positions : kAttnRowsBlockPositions, k_pitch, 0, false};
}
// The staging's values a lane loads before it stores them (attn_rows.cuh's stage_rows): 32 x lane_dims columns of
// this many rows, 8 values (more spilled in the interpreter).
MK_HOST_DEVICE constexpr uint32_t attn_rows_stage_rows(uint32_t lane_dims) {
    return lane_dims >= 8 ? 1 : 8 / lane_dims;
}
// Whether the device prefetches a block's K and V rows into L1 during the block before: where both fit in 20 KiB of
// the ~28 KiB of L1 the resident kernel leaves beside 13 pages (the slots' q broadcasts take the rest): head_dim 64
// with an fp32 cache (15.5 KiB for 31 positions), not 128 (31 KiB).
inline constexpr uint32_t kAttnRowsPrefetchBytes = 20 * 1024;
MK_HOST_DEVICE inline bool attn_rows_prefetched(uint32_t rows, uint32_t head_dim, uint32_t element_bytes) {
    return 2ull * rows * head_dim * element_bytes <= kAttnRowsPrefetchBytes;
}
// A lane's output accumulators per slot (the head's dims a pass covers: 32 times as many): only as many as the head
// needs, as predicated-off multiply-adds still issue.
MK_HOST_DEVICE inline uint32_t attn_rows_lane_dims(uint32_t head_dim) {
    return head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
}

// The tensor-core path (attn_rows_mma.cuh), for head_dim a multiple of 16 up to 64: a warp takes a tile of 16
// (query, head) pairs, S = Q K^T and O += P V as mma.sync m16n8k16 on bf16 halves, over blocks of 16 positions (one
// k-step of P V; 32 held 8 more registers, and the interpreter kernel spilled). The team stages a block's K rows as
// bf16 pairs along the dims (K[t][2w], K[t][2w+1] in word t * kAttnMmaKPitch + w) and V transposed, as pairs along
// the positions (V[2u][d], V[2u+1][d] in word v_off + d * kAttnMmaVPitch + u), both at once (two barriers a block),
// an fp32 cache as hi words then lo words (halves: 2), a bf16 one as it is (1): 10.5 KiB at head_dim 64 in fp32.
// Pitches of 4 mod 8 words: the fragments' loads (8 rows x 4 words) fall in 32 banks; fixed, so a lane's fragment
// addresses are one register plus immediates (per-head pitches held ~40 address registers across the block loop).
// A wider head stays on the CUDA cores: its q and O fragments alone would hold 128 registers a lane.
inline constexpr uint32_t kAttnMmaTile = 16;            // pairs a warp carries
inline constexpr uint32_t kAttnMmaBlockPositions = 16;  // positions a staged block holds
inline constexpr uint32_t kAttnMmaMaxHeadDim = 64;
inline constexpr uint32_t kAttnMmaKPitch = kAttnMmaMaxHeadDim / 2 + 4;      // words
inline constexpr uint32_t kAttnMmaVPitch = kAttnMmaBlockPositions / 2 + 4;  // words
struct AttnMmaStage {
    bool used = false;  // false: the head or the scratch does not take this path
    uint32_t halves;
    uint32_t k_lo, v_off, v_lo;  // words: K's lo half, V's hi and lo halves
};
// How the tensor-core path deals an instruction's (query, head) pairs: both query blocks' in one list, the later
// block's first, 16 to a tile and a tile to a warp a round. A round walks the positions its latest query sees, so
// one round over both blocks walks the later block's span once (rather than each block's in turn), and where there
// are more rounds the last ones hold the earlier block's shorter walks. `n`: the step's tokens (later ones dropped).
struct AttnMmaPairs {
    uint32_t late_begin, late_pairs, early_begin, early_pairs, group;
    MK_HOST_DEVICE uint32_t count() const { return late_pairs + early_pairs; }
    MK_HOST_DEVICE uint32_t query(uint32_t p) const {
        return p < late_pairs ? late_begin + p / group : early_begin + (p - late_pairs) / group;
    }
    MK_HOST_DEVICE uint32_t head(uint32_t p) const { return (p < late_pairs ? p : p - late_pairs) % group; }
    // The latest query of pairs [first, last] (the late block's queries all follow the early block's).
    MK_HOST_DEVICE uint32_t last_query(uint32_t first, uint32_t last) const {
        return query(first < late_pairs && last >= late_pairs ? late_pairs - 1 : last);
    }
};
MK_HOST_DEVICE inline AttnMmaPairs attn_mma_pairs(const AttnRowsArgs& a, uint32_t n) {
    const auto pairs = [&](QueryBlock b) {
        const uint32_t end = b.begin + b.count < n ? b.begin + b.count : n;
        return end > b.begin ? (end - b.begin) * a.group : 0u;
    };
    const QueryBlock early = attn_query_block(a, 0), late = attn_query_block(a, 1);
    return {late.begin, pairs(late), early.begin, pairs(early), a.group};
}
MK_HOST_DEVICE inline AttnMmaStage attn_rows_mma_stage(uint32_t head_dim, bool bf16_cache, uint32_t scratch_floats) {
    AttnMmaStage st{};
    if (head_dim == 0 || head_dim % 16 != 0 || head_dim > kAttnMmaMaxHeadDim) return st;
    st.halves = bf16_cache ? 1 : 2;
    st.k_lo = kAttnMmaBlockPositions * kAttnMmaKPitch;
    st.v_off = st.halves * st.k_lo;
    st.v_lo = st.v_off + head_dim * kAttnMmaVPitch;
    st.used = st.v_off + st.halves * head_dim * kAttnMmaVPitch <= scratch_floats;
    return st;
}

struct AttnRowsOp {
    static constexpr Opcode opcode = Opcode::attn_rows;
    using Args = AttnRowsArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims& dims) {
        auto a = decode_args<AttnRowsArgs>(ins);
        if (a.kv_head >= dims.n_kv_heads || uint64_t(a.kv_head + 1) * a.group > dims.n_heads ||
            uint64_t(a.q_begin) + a.n_q > a.n_tok || (a.n_q2 && (a.q2_begin < a.q_begin + a.n_q ||
                                                                   uint64_t(a.q2_begin) + a.n_q2 > a.n_tok)))
            fail_args(a, dims);
        const uint64_t slot = uint64_t(a.layer) * dims.kv_dim() + uint64_t(a.kv_head) * a.head_dim;
        std::vector<Access> out{{Space::k_cache, slot, slot + a.head_dim, false, PosMode::upto_pos, a.n_tok},
                                {Space::v_cache, slot, slot + a.head_dim, false, PosMode::upto_pos, a.n_tok}};
        const uint32_t q_dim = dims.q_dim(), h0 = a.kv_head * a.group * a.head_dim, width = a.group * a.head_dim;
        for (uint32_t b = 0; b < kAttnQueryBlocks; ++b) {
            const QueryBlock block = attn_query_block(a, b);
            for (uint32_t j = block.begin; j < block.begin + block.count; ++j) {
                const uint64_t q = a.q_off + 4ull * (uint64_t(j) * q_dim + h0);
                const uint64_t o = a.out_off + 4ull * (uint64_t(j) * q_dim + h0);
                out.push_back({Space::arena, q, q + 4ull * width, false});
                out.push_back({Space::arena, o, o + 4ull * width, true});
            }
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    // Cost at a nominal 512-token context (as attn_partial): each query reads its keys and values once.
    static Cost cost(const Instruction& ins, const ModelDims& dims, const WeightFormat*) {
        auto a = decode_args<AttnRowsArgs>(ins);
        const uint64_t positions = 512;
        const uint64_t queries = a.n_q + a.n_q2;
        return {0, 2ull * dims.kv_bytes() * positions * a.head_dim, 4 * positions * a.head_dim * a.group * queries};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    [[noreturn]] static void fail_args(const AttnRowsArgs& a, const ModelDims& dims);
    static std::string describe(const Instruction& ins);
};

}  // namespace mk

// rms_qkv: RMSNorm of the residual, then a block of rows of Q, K or V (+ Qwen2 bias, + Qwen3
// per-head QK-norm), RoPE on Q and K, and for K/V the append to the KV cache at pos. Blocks hold
// whole rotary pairs (even row_begin and n_rows), and whole heads when QK-norm is on.
#pragma once
#include "instructions/common/page_plan.hpp"

namespace mk {

enum class QkvKind : uint32_t { q = 0, k = 1, v = 2 };

// With a bf16 KV cache the device finishes a K/V block's rows in fp32 in the scratch after the normalized
// input (op_scratch_bytes leaves 1024 - 64 floats there) and rounds each once when storing, so such blocks
// hold at most this many rows (the graph splits them so; accesses() refuses more).
inline constexpr uint32_t kMaxStagedKvRows = 512;

struct RmsQkvArgs {
    uint32_t layer;
    uint32_t kind;        // QkvKind
    uint32_t row_begin;   // first output row of the block within Q (n_heads * head_dim) or K/V (kv_dim)
    uint32_t n_rows;
    uint32_t x_off;       // (d_model) fp32 residual stream
    uint32_t q_off;       // (n_heads, head_dim) fp32 query buffer (kind q only)
    uint32_t weight;      // wq/wk/wv (heads * head_dim, d_model)
    uint32_t norm;        // attn_norm (d_model) f32
    uint32_t bias;        // bq/bk/bv or kNoWeight
    uint32_t qk_norm;     // q_norm/k_norm (head_dim) f32 or kNoWeight
    uint32_t d_model;
    uint32_t head_dim;
};

struct RmsQkvOp {
    static constexpr Opcode opcode = Opcode::rms_qkv;
    using Args = RmsQkvArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims& dims) {
        auto a = decode_args<RmsQkvArgs>(ins);
        std::vector<Access> out{{Space::arena, a.x_off, a.x_off + 4ull * a.d_model, false}};
        if (QkvKind(a.kind) == QkvKind::q) {
            uint64_t begin = a.q_off + 4ull * a.row_begin;
            out.push_back({Space::arena, begin, begin + 4ull * a.n_rows, true});
        } else {
            if (dims.kv_type == uint32_t(KvType::bf16) && a.n_rows > kMaxStagedKvRows) fail_staged_rows(a);
            uint64_t slot = uint64_t(a.layer) * dims.kv_dim() + a.row_begin;
            Space space = QkvKind(a.kind) == QkvKind::k ? Space::k_cache : Space::v_cache;
            out.push_back({space, slot, slot + a.n_rows, true, PosMode::at_pos});
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<RmsQkvArgs>(ins);
        // The projection and the norm are required: kNoWeight there is a bad id, not an absent option.
        std::vector<uint32_t> ids{a.weight, a.norm};
        for (uint32_t id : present({a.bias, a.qk_norm})) ids.push_back(id);
        return ids;
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<RmsQkvArgs>(ins);
        return row_tiles_plan(in, a.weight, a.row_begin, a.n_rows);
    }
    static Cost cost(const Instruction& ins, const ModelDims& dims, const WeightFormat* w) {
        auto a = decode_args<RmsQkvArgs>(ins);
        uint64_t rows = a.n_rows;
        const uint64_t out_bytes = QkvKind(a.kind) == QkvKind::q ? 4 : dims.kv_bytes();  // K/V: the cache's type
        return {rows * w[a.weight].row_bytes, 4ull * a.d_model + out_bytes * rows, 2 * rows * a.d_model};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (rms_qkv_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    // The block's rows for one token's residual `x` at position `pos`, in float64 (norm, projection, bias,
    // QK-norm, RoPE on Q and K); rms_qkv_rows' reference runs it for each token of a chunk.
    static std::vector<double> reference_rows(const OpBuffers& buffers, const RmsQkvArgs& a, const std::vector<double>& x,
                                              int32_t pos);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
    [[noreturn]] static void fail_staged_rows(const RmsQkvArgs& a);
};

}  // namespace mk

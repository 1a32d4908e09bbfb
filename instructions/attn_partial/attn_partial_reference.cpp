// attn_partial's float64 reference and cases: one KV head's chunk of positions (some empty) for each
// query head of its group.
#include "instructions/attn_partial/attn_partial.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> AttnPartialOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<AttnPartialArgs>(ins);
    int32_t begin = 0, end = 0;
    attn_chunk(b.step.pos, a.part, a.n_parts, begin, end);
    std::vector<Expected> out;
    for (uint32_t g = 0; g < a.group; ++g) {
        const uint32_t h = a.kv_head * a.group + g;
        const std::vector<double> q = ref_f32(b, a.q_off + 4ull * h * a.head_dim, a.head_dim);
        std::vector<double> scores;
        for (int32_t t = begin; t < end; ++t) {
            const float* k = &b.k_cache[b.cache_index(a.layer, a.kv_head, t)];
            scores.push_back(ref_dot(q, std::vector<double>(k, k + a.head_dim)) / std::sqrt(double(a.head_dim)));
        }
        double m = -std::numeric_limits<double>::infinity(), l = 0.0;
        for (double s : scores) m = std::max(m, s);
        std::vector<double> o(a.head_dim, 0.0);
        for (int32_t t = begin; t < end; ++t) {
            const double p = std::exp(scores[size_t(t - begin)] - m);
            l += p;
            const float* v = &b.v_cache[b.cache_index(a.layer, a.kv_head, t)];
            for (uint32_t i = 0; i < a.head_dim; ++i) o[i] += p * v[i];
        }
        const uint64_t slot = uint64_t(h) * a.n_parts + a.part;
        out.push_back(ref_arena(fmt::format("o head {}", h), a.o_off + 4 * slot * a.head_dim, std::move(o)));
        out.push_back(ref_arena(fmt::format("(m, l) head {}", h), a.ml_off + 8 * slot, {m, l}));
    }
    return out;
}

std::vector<OpCase> AttnPartialOp::cases(uint64_t seed) {
    struct Shape {
        uint32_t head_dim, n_heads;  // 2 KV heads
        int32_t pos;
        uint32_t kv_head, part, n_parts;
    };
    std::vector<OpCase> out;
    // pos 1 in 4 parts: part 3 is empty (m = -inf, l = 0). head_dim 64 and 128 take the device's streaming
    // path (32 positions per warp per trip): 300 positions give some warps two blocks of 32, and a partial one.
    // A bf16 cache: the per-head path (hd 32) and both streaming widths, its values exact bf16 (CaseBuilder::caches).
    for (const KvType kv_type : {KvType::f32, KvType::bf16})
    for (const Shape& s : {Shape{32, 6, 0, 0, 0, 1}, Shape{32, 6, 20, 1, 1, 3}, Shape{32, 6, 20, 0, 2, 3},
                           Shape{32, 6, 1, 1, 3, 4}, Shape{32, 6, 37, 1, 0, 2}, Shape{64, 8, 299, 1, 0, 1},
                           Shape{64, 8, 40, 0, 1, 2}, Shape{128, 4, 70, 0, 1, 2}}) {
        if (kv_type == KvType::bf16 && s.pos != 37 && s.pos != 299 && s.pos != 70) continue;
        const ModelDims dims{.n_layers = 2, .n_heads = s.n_heads, .n_kv_heads = 2, .head_dim = s.head_dim,
                             .kv_type = uint32_t(kv_type)};
        CaseBuilder c(dims, seed++);
        c.caches(uint32_t(s.pos) + 1);
        c.buffers().step.pos = s.pos;
        const uint32_t q = c.activation(dims.q_dim());
        const uint32_t o = c.activation(uint64_t(dims.n_heads) * s.n_parts * dims.head_dim);
        const uint32_t ml = c.activation(2ull * dims.n_heads * s.n_parts);
        const AttnPartialArgs a{1, s.kv_head, s.part, s.n_parts, q, o, ml, dims.head_dim, dims.group_size()};
        out.push_back(c.finish(fmt::format("attn_partial hd {} group {} pos {} kv{} part {}/{} {} cache", s.head_dim,
                                           dims.group_size(), s.pos, s.kv_head, s.part, s.n_parts,
                                           kv_type_name(dims.kv_type)),
                               make_instruction<AttnPartialOp>(a)));
    }
    return out;
}

}  // namespace mk

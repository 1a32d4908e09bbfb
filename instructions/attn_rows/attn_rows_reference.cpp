// attn_rows' float64 reference and cases: query blocks of a chunk after earlier positions, full and shorter.
#include "instructions/attn_rows/attn_rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> AttnRowsOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<AttnRowsArgs>(ins);
    const uint32_t n = step_tokens(b.step, a.n_tok), q_dim = b.dims.q_dim(), hd = a.head_dim;
    std::vector<Expected> out;
    std::vector<uint32_t> queries;
    for (uint32_t b = 0; b < kAttnQueryBlocks; ++b) {
        const QueryBlock block = attn_query_block(a, b);
        for (uint32_t j = block.begin; j < block.begin + block.count; ++j) queries.push_back(j);
    }
    for (const uint32_t j : queries) {
        const uint64_t h0 = uint64_t(a.kv_head) * a.group;
        const uint64_t off = a.out_off + 4ull * (uint64_t(j) * q_dim + h0 * hd);
        std::vector<double> o = ref_f32(b, off, uint64_t(a.group) * hd);  // left as it is past the step's tokens
        if (j < n) {
            const int32_t visible = b.step.pos + int32_t(j) + 1;
            for (uint32_t g = 0; g < a.group; ++g) {
                const std::vector<double> q = ref_f32(b, a.q_off + 4ull * (uint64_t(j) * q_dim + (h0 + g) * hd), hd);
                std::vector<double> s(size_t(visible), 0.0);
                for (int32_t t = 0; t < visible; ++t) {
                    const uint64_t k = b.cache_index(a.layer, a.kv_head, t);
                    for (uint32_t i = 0; i < hd; ++i) s[size_t(t)] += q[i] * b.k_cache[k + i];
                    s[size_t(t)] /= std::sqrt(double(hd));
                }
                const double m = *std::max_element(s.begin(), s.end());
                double l = 0.0;
                std::vector<double> acc(hd, 0.0);
                for (int32_t t = 0; t < visible; ++t) {
                    const double p = std::exp(s[size_t(t)] - m);
                    l += p;
                    const uint64_t v = b.cache_index(a.layer, a.kv_head, t);
                    for (uint32_t i = 0; i < hd; ++i) acc[i] += p * b.v_cache[v + i];
                }
                for (uint32_t i = 0; i < hd; ++i) o[g * hd + i] = acc[i] / l;
            }
        }
        out.push_back(ref_arena(fmt::format("out[{}]", j), off, std::move(o)));
    }
    return out;
}

std::vector<OpCase> AttnRowsOp::cases(uint64_t seed) {
    // Head dims that are multiples of 16 up to 64 run on the device's tensor cores (attn_rows_mma.cuh: tiles of 16
    // (query, head) pairs a warp, rounds of 7 tiles, blocks of 16 positions), the others on its CUDA cores
    // (attn_rows.cuh: blocks of up to 32 positions, 4 pairs a warp). The longer cases span several blocks and rounds,
    // with a tile's or round's queries seeing different positions and a last tile partly empty; head_dim 128 stages
    // K and V in turn, 18 reads q one float at a time, 288 takes two passes over the dims, 48 leaves a tensor-core
    // k-step of q unused; the paired cases have a second, later query block (one cut short by the step).
    struct Shape {
        uint32_t n_heads, n_kv_heads, head_dim, kv_head, q_begin, n_q, n_tok, n;
        int32_t pos;
        uint32_t ctx, q2_begin = 0, n_q2 = 0;
    };
    std::vector<OpCase> out;
    for (const KvType kv_type : {KvType::f32, KvType::bf16})
    for (const Shape& s : {Shape{6, 2, 32, 0, 0, 4, 4, 4, 0, 24}, Shape{6, 2, 32, 1, 2, 3, 6, 6, 7, 24},
                           Shape{6, 2, 32, 1, 3, 3, 6, 4, 11, 24}, Shape{8, 2, 64, 1, 4, 40, 48, 47, 21, 72},
                           Shape{6, 3, 128, 2, 0, 19, 19, 19, 30, 52}, Shape{4, 4, 18, 3, 1, 9, 12, 12, 33, 48},
                           Shape{2, 1, 288, 0, 0, 3, 3, 3, 40, 44}, Shape{8, 2, 64, 0, 2, 9, 40, 37, 5, 48, 29, 9},
                           Shape{6, 2, 32, 1, 0, 2, 8, 8, 0, 24, 6, 2}, Shape{9, 3, 48, 2, 5, 40, 48, 46, 13, 64},
                           Shape{9, 3, 64, 1, 0, 20, 60, 60, 3, 72, 40, 20}}) {
        const ModelDims dims{.n_layers = 2, .d_model = 128, .n_heads = s.n_heads, .n_kv_heads = s.n_kv_heads,
                             .head_dim = s.head_dim, .kv_type = uint32_t(kv_type)};
        CaseBuilder c(dims, seed++);
        c.caches(s.ctx);
        c.buffers().step.pos = s.pos;
        c.buffers().step.n_tokens = int32_t(s.n);
        const uint32_t q = c.activation(uint64_t(s.n_tok) * dims.q_dim());
        const uint32_t o = c.activation(uint64_t(s.n_tok) * dims.q_dim());
        const AttnRowsArgs args{1, s.kv_head, s.q_begin, s.n_q, q, o, dims.head_dim, dims.group_size(), s.n_tok,
                                s.q2_begin, s.n_q2};
        out.push_back(c.finish(fmt::format("attn_rows head_dim {} group {} kv{} queries {} of {} tokens ({} run) "
                                           "at pos {}, {} cache",
                                           s.head_dim, dims.group_size(), s.kv_head, attn_query_blocks_text(args),
                                           s.n_tok, s.n, s.pos, kv_type_name(dims.kv_type)),
                               make_instruction<AttnRowsOp>(args)));
    }
    return out;
}

}  // namespace mk

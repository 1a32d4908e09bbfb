// attn_partial on the CPU.
#include "instructions/attn_partial/attn_partial.hpp"

#include <fmt/format.h>

#include "models/error.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace mk {

void AttnPartialOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<AttnPartialArgs>(ins);
    int32_t begin = 0, end = 0;
    attn_chunk(ctx.step->pos, a.part, a.n_parts, begin, end);
    thread_local std::vector<float> k_widened, v_widened;  // the chunk's rows when the cache stores bf16
    const float* keys = ctx.kv_rows(Space::k_cache, a.layer, a.kv_head, begin, end, k_widened);    // row t - begin
    const float* values = ctx.kv_rows(Space::v_cache, a.layer, a.kv_head, begin, end, v_widened);  // row t - begin
    const float scale = 1.0f / std::sqrt(float(a.head_dim));
    thread_local std::vector<float> scores;
    scores.resize(size_t(std::max(0, end - begin)));

    for (uint32_t g = 0; g < a.group; ++g) {
        const uint32_t h = a.kv_head * a.group + g;
        const float* q = ctx.f32(a.q_off) + size_t(h) * a.head_dim;
        float* o = ctx.f32(a.o_off) + (size_t(h) * a.n_parts + a.part) * a.head_dim;
        float* ml = ctx.f32(a.ml_off) + (size_t(h) * a.n_parts + a.part) * 2;
        float m = -std::numeric_limits<float>::infinity();
        for (int32_t t = begin; t < end; ++t) {
            const float* k = keys + size_t(t - begin) * a.head_dim;
            float s = 0.0f;
            for (uint32_t i = 0; i < a.head_dim; ++i) s += q[i] * k[i];
            scores[t - begin] = s * scale;
            m = std::max(m, scores[t - begin]);
        }
        std::fill(o, o + a.head_dim, 0.0f);
        float l = 0.0f;
        for (int32_t t = begin; t < end; ++t) {
            const float p = std::exp(scores[t - begin] - m);
            l += p;
            const float* v = values + size_t(t - begin) * a.head_dim;
            for (uint32_t i = 0; i < a.head_dim; ++i) o[i] += p * v[i];
        }
        ml[0] = m;
        ml[1] = l;
    }
}

std::string AttnPartialOp::describe(const Instruction& ins) {
    auto a = decode_args<AttnPartialArgs>(ins);
    return fmt::format("attn_partial L{} kv{} part {}/{}", a.layer, a.kv_head, a.part, a.n_parts);
}

void AttnPartialOp::fail_heads(const AttnPartialArgs& a, const ModelDims& dims) {
    fail("attn_partial: kv head {} × group {} (part {} of {}) is outside the model's {} heads, {} KV heads", a.kv_head,
         a.group, a.part, a.n_parts, dims.n_heads, dims.n_kv_heads);
}

}  // namespace mk

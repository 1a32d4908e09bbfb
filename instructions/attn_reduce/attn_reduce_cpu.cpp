// attn_reduce on the CPU.
#include "instructions/attn_reduce/attn_reduce.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace mk {

void AttnReduceOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<AttnReduceArgs>(ins);
    for (uint32_t g = 0; g < a.group; ++g) {
        const uint32_t h = a.kv_head * a.group + g;
        const float* ml = ctx.f32(a.ml_off) + size_t(h) * a.n_parts * 2;
        const float* o = ctx.f32(a.o_off) + size_t(h) * a.n_parts * a.head_dim;
        float* out = ctx.f32(a.out_off) + size_t(h) * a.head_dim;
        float m = -std::numeric_limits<float>::infinity();
        for (uint32_t p = 0; p < a.n_parts; ++p)
            if (ml[2 * p + 1] > 0.0f) m = std::max(m, ml[2 * p]);
        float total = 0.0f;
        std::fill(out, out + a.head_dim, 0.0f);
        for (uint32_t p = 0; p < a.n_parts; ++p) {  // fixed order: deterministic on every backend
            if (ml[2 * p + 1] <= 0.0f) continue;     // empty chunk
            const float w = std::exp(ml[2 * p] - m);
            total += w * ml[2 * p + 1];
            for (uint32_t i = 0; i < a.head_dim; ++i) out[i] += w * o[size_t(p) * a.head_dim + i];
        }
        const float inv = 1.0f / total;
        for (uint32_t i = 0; i < a.head_dim; ++i) out[i] *= inv;
    }
}

std::string AttnReduceOp::describe(const Instruction& ins) {
    auto a = decode_args<AttnReduceArgs>(ins);
    return fmt::format("attn_reduce L{} kv{} parts {}", a.layer, a.kv_head, a.n_parts);
}

}  // namespace mk

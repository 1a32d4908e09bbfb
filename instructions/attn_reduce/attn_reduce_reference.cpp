// attn_reduce's float64 reference and cases: the log-sum-exp merge of a KV head's partials, empty ones included.
#include "instructions/attn_reduce/attn_reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> AttnReduceOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<AttnReduceArgs>(ins);
    std::vector<Expected> out;
    for (uint32_t g = 0; g < a.group; ++g) {
        const uint32_t h = a.kv_head * a.group + g;
        const std::vector<double> ml = ref_f32(b, a.ml_off + 8ull * h * a.n_parts, 2ull * a.n_parts);
        const std::vector<double> o = ref_f32(b, a.o_off + 4ull * h * a.n_parts * a.head_dim, uint64_t(a.n_parts) * a.head_dim);
        double m = -std::numeric_limits<double>::infinity(), total = 0.0;
        for (uint32_t p = 0; p < a.n_parts; ++p)
            if (ml[2 * p + 1] > 0.0) m = std::max(m, ml[2 * p]);
        std::vector<double> sum(a.head_dim, 0.0);
        for (uint32_t p = 0; p < a.n_parts; ++p) {
            if (ml[2 * p + 1] <= 0.0) continue;
            const double w = std::exp(ml[2 * p] - m);
            total += w * ml[2 * p + 1];
            for (uint32_t i = 0; i < a.head_dim; ++i) sum[i] += w * o[size_t(p) * a.head_dim + i];
        }
        for (double& v : sum) v /= total;
        out.push_back(ref_arena(fmt::format("out head {}", h), a.out_off + 4ull * h * a.head_dim, std::move(sum)));
    }
    return out;
}

std::vector<OpCase> AttnReduceOp::cases(uint64_t seed) {
    const ModelDims dims{.n_layers = 1, .n_heads = 6, .n_kv_heads = 2, .head_dim = 32};
    std::vector<OpCase> out;
    for (uint32_t n_parts : {1u, 3u, 5u})
        for (uint32_t kv_head : {0u, 1u}) {
            CaseBuilder c(dims, seed++);
            const uint32_t o = c.activation(uint64_t(dims.n_heads) * n_parts * dims.head_dim);
            const uint32_t ml = c.activation(2ull * dims.n_heads * n_parts);
            const uint32_t attn_out = c.activation(dims.q_dim());
            std::vector<float> values;  // (max score, sum of exp) per head and part; the last of 5 parts empty
            for (uint32_t i = 0; i < dims.n_heads * n_parts; ++i) {
                const bool empty = n_parts == 5 && i % n_parts == 4;
                values.push_back(empty ? -std::numeric_limits<float>::infinity() : c.uniform(-3.0f, 3.0f));
                values.push_back(empty ? 0.0f : c.uniform(0.5f, 8.0f));
            }
            c.fill(ml, std::move(values));
            const AttnReduceArgs a{0, kv_head, n_parts, o, ml, attn_out, dims.head_dim, dims.group_size()};
            out.push_back(c.finish(fmt::format("attn_reduce kv{} parts {}", kv_head, n_parts), make_instruction<AttnReduceOp>(a)));
        }
    return out;
}

}  // namespace mk

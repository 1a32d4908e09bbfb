// attn_rows on the CPU: per query and head, scores over the visible keys, softmax, weighted sum of values.
// The two inner loops (q . k and o += p v, head_dim long) have an AVX2 twin where mk's CPU ISA is AVX2: the
// scalar q . k is one chain of dependent adds, and attention was 20% of a pp256 profile with it (perf, SmolLM2).
#include "instructions/attn_rows/attn_rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "models/error.hpp"
#include "models/quant.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define MK_ATTN_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace mk {

namespace {

// One query head over keys/values [0, visible): o = softmax(scale * q . k) . v; scores is scratch.
void attend_scalar(const float* q, const float* keys, const float* values, int32_t visible, uint32_t hd, float scale,
                   float* scores, float* o) {
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t t = 0; t < visible; ++t) {
        const float* k = keys + size_t(t) * hd;
        float s = 0.0f;
        for (uint32_t i = 0; i < hd; ++i) s += q[i] * k[i];
        scores[t] = s * scale;
        m = std::max(m, scores[t]);
    }
    std::fill(o, o + hd, 0.0f);
    float l = 0.0f;
    for (int32_t t = 0; t < visible; ++t) {
        const float p = std::exp(scores[t] - m);
        l += p;
        const float* v = values + size_t(t) * hd;
        for (uint32_t i = 0; i < hd; ++i) o[i] += p * v[i];
    }
    for (uint32_t i = 0; i < hd; ++i) o[i] /= l;
}

#if defined(__x86_64__)
// The 8 lanes summed in a fixed tree, ((0+4)+(2+6)) + ((1+5)+(3+7)).
MK_ATTN_AVX2 float hsum_avx2(__m256 v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// exp(x) of 8 values x <= 0 (scores less their max), within 1 ulp of the correctly rounded exp (measured at 2e7
// points of [-87, 0]): x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-7 polynomial (the Cephes expf
// coefficients), 2^n added to the exponent. Below -87 the result is taken as exp(-87) ~ 1.6e-38, which a softmax
// sum of at least 1 cannot see. std::exp per score was 10% of SmolLM2's pp512 profile (libm's scalar expf).
MK_ATTN_AVX2 __m256 exp_nonpositive_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);  // a NaN (maxps' second operand) stays NaN, as std::exp keeps it
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // r = x - n ln2 in two steps (ln2's high part exact in few bits, so n * it is exact).
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

// The same with 8-wide q . k and o += p v (hd a multiple of 8, at most 256), the exps 8 at a time.
MK_ATTN_AVX2 void attend_avx2(const float* q, const float* keys, const float* values, int32_t visible, uint32_t hd,
                              float scale, float* scores, float* o) {
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t t = 0; t < visible; ++t) {
        const float* k = keys + size_t(t) * hd;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t i = 0; i < hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
        scores[t] = hsum_avx2(acc) * scale;
        m = std::max(m, scores[t]);
    }
    // The weights p = exp(score - m) in place, and their sum l.
    const __m256 max_score = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int32_t t = 0;
    for (; t + 8 <= visible; t += 8) {
        const __m256 p = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + t), max_score));
        _mm256_storeu_ps(scores + t, p);
        sum = _mm256_add_ps(sum, p);
    }
    float l = hsum_avx2(sum);
    for (; t < visible; ++t) l += scores[t] = std::exp(scores[t] - m);
    __m256 out[32];
    const uint32_t n_vec = hd / 8;
    for (uint32_t i = 0; i < n_vec; ++i) out[i] = _mm256_setzero_ps();
    for (int32_t t = 0; t < visible; ++t) {
        const __m256 pv = _mm256_set1_ps(scores[t]);
        const float* v = values + size_t(t) * hd;
        for (uint32_t i = 0; i < n_vec; ++i) out[i] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + 8 * i), out[i]);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / l);
    for (uint32_t i = 0; i < n_vec; ++i) _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(out[i], inv));
}
#endif

}  // namespace

void AttnRowsOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<AttnRowsArgs>(ins);
    const uint32_t n = step_tokens(*ctx.step, a.n_tok), q_dim = ctx.dims->q_dim(), hd = a.head_dim;
    // Rows 0..pos+n-1 (a bf16 cache widened once per instruction, not per query).
    thread_local std::vector<float> k_widened, v_widened;
    const int32_t n_rows = ctx.step->pos + int32_t(n);
    const float* keys = ctx.kv_rows(Space::k_cache, a.layer, a.kv_head, 0, n_rows, k_widened);
    const float* values = ctx.kv_rows(Space::v_cache, a.layer, a.kv_head, 0, n_rows, v_widened);
    const float scale = 1.0f / std::sqrt(float(hd));
    auto attend = attend_scalar;
#if defined(__x86_64__)
    if (cpu_isa() != CpuIsa::Scalar && hd % 8 == 0 && hd <= 256) attend = attend_avx2;
#endif
    thread_local std::vector<float> scores;
    scores.resize(size_t(ctx.step->pos) + n);
    for (uint32_t b = 0; b < kAttnQueryBlocks; ++b) {
        const QueryBlock block = attn_query_block(a, b);
        for (uint32_t j = block.begin; j < std::min(block.begin + block.count, n); ++j)
            for (uint32_t g = 0; g < a.group; ++g) {
                const size_t h = size_t(a.kv_head) * a.group + g;
                attend(ctx.f32(a.q_off) + size_t(j) * q_dim + h * hd, keys, values, ctx.step->pos + int32_t(j) + 1, hd,
                       scale, scores.data(), ctx.f32(a.out_off) + size_t(j) * q_dim + h * hd);
            }
    }
}

std::string attn_query_blocks_text(const AttnRowsArgs& a) {
    const std::string first = fmt::format("[{}, {})", a.q_begin, a.q_begin + a.n_q);
    return a.n_q2 ? fmt::format("{} and [{}, {})", first, a.q2_begin, a.q2_begin + a.n_q2) : first;
}

std::string AttnRowsOp::describe(const Instruction& ins) {
    auto a = decode_args<AttnRowsArgs>(ins);
    return fmt::format("attn_rows L{} kv{} queries {} T={}", a.layer, a.kv_head, attn_query_blocks_text(a), a.n_tok);
}

void AttnRowsOp::fail_args(const AttnRowsArgs& a, const ModelDims& dims) {
    fail("attn_rows: kv head {} x group {}, queries {} of {}: outside the model's {} heads, {} KV heads, or the blocks "
         "out of order",
         a.kv_head, a.group, attn_query_blocks_text(a), a.n_tok, dims.n_heads, dims.n_kv_heads);
}

}  // namespace mk

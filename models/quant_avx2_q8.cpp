// Fast-mode AVX2 kernels: the BlockQ8 activation quantizer and integer dots (maddubs: u8 x s8 pairs
// summed to i16, madd: i16 pairs to i32, exact) for Q8_0, Q4_0, Q4_1, Q4_K and Q6_K weights.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Same arithmetic as the scalar quantizer (quant_q8.cpp): amax exact, one division, products
// rounded to nearest even by cvtps (the default mode, as nearbyint), so the blocks are identical.
MK_AVX2 void quantize_q8(const float* x, int64_t n, BlockQ8* out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    // packs interleaves the 128-bit lanes; this puts the 4-byte groups back in value order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / kQ8BlockValues; ++b) {
        const float* xb = x + b * kQ8BlockValues;
        const __m256 v0 = loadu(xb), v1 = loadu(xb + 8), v2 = loadu(xb + 16), v3 = loadu(xb + 24);
        const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3));
        const float amax = hmax(_mm256_max_ps(m01, m23));
        const __m256 id = _mm256_set1_ps(amax > 0 ? 127 / amax : 0);
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
        const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), _mm256_permutevar8x32_epi32(packed, order));
        out[b].d = amax / 127;
        out[b].sum = out[b].d * float(sum);
    }
}

MK_AVX2 __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Eight i32 lanes of sum(u * s) over the 32 byte pairs; u <= 128, |s| <= 127 keeps maddubs's i16
// pair sums (<= 32512) from saturating.
MK_AVX2 __m256 dot_u8_s8(__m256i u, __m256i s) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

// Signed weights: |w| as the unsigned side, x with w's sign as the signed side (exact products).
MK_AVX2 __m256 dot_s8_s8(__m256i w, __m256i x) { return dot_u8_s8(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }

// Each format's step adds one 32-value block's dot to `acc` (lanes) and `offset` (a scalar, for
// formats with an offset term). The driver alternates two pairs of accumulators: with one pair, each
// block waits on the previous block's FMAs (4 cycles) while the rest of a block takes ~3; Q4_1
// 576 x 3072 went from 16.7 to X GB/s (mk_dot_bench --formats Q4_1).
template <typename K>
MK_AVX2 float dot_blocks(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float offset0 = 0, offset1 = 0;
    const int64_t n_blocks = n / 32;
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
        acc0 = K::step(acc0, offset0, row + b * K::kBytes, xq[b]);
        acc1 = K::step(acc1, offset1, row + (b + 1) * K::kBytes, xq[b + 1]);
    }
    if (b < n_blocks) acc0 = K::step(acc0, offset0, row + b * K::kBytes, xq[b]);
    return hsum(_mm256_add_ps(acc0, acc1)) + (offset0 + offset1);
}

struct StepQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    MK_AVX2 static __m256 step(__m256 acc, float&, const uint8_t* w, const BlockQ8& x) {
        return _mm256_fmadd_ps(dot_s8_s8(load32(w + 2), load32(x.q)), _mm256_set1_ps(f16_at(w) * x.d), acc);
    }
};

struct StepQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    MK_AVX2 static __m256 step(__m256 acc, float&, const uint8_t* w, const BlockQ8& x) {
        const __m256i q = _mm256_sub_epi8(unpack_nibbles(w + 2), _mm256_set1_epi8(8));
        return _mm256_fmadd_ps(dot_s8_s8(q, load32(x.q)), _mm256_set1_ps(f16_at(w) * x.d), acc);
    }
};

// Q4_1: d * dx * sum(q * qx) in lanes, plus m * (the block's activation sum) in the scalar.
struct StepQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    MK_AVX2 static __m256 step(__m256 acc, float& offsets, const uint8_t* w, const BlockQ8& x) {
        offsets += f16_at(w + 2) * x.sum;
        return _mm256_fmadd_ps(dot_u8_s8(unpack_nibbles(w + 4), load32(x.q)), _mm256_set1_ps(f16_at(w) * x.d), acc);
    }
};

// Q4_K sub-block j lines up with activation block 8 * sb + j: (d * scale_j * dx) * sum(q * qx) in
// lanes, minus dmin * min_j * (the block's activation sum) in a scalar. q holds sub-block j's 32
// nibbles as bytes.
MK_AVX2 __m256 q4_k_sub(__m256 acc, float& offsets, const uint8_t* w, int j, __m256i q, const BlockQ8& x) {
    const ScaleMin sm = unpack_scale_min(w + 4, j);
    offsets += f16_at(w + 2) * float(sm.min) * x.sum;
    return _mm256_fmadd_ps(dot_u8_s8(q, load32(x.q)), _mm256_set1_ps(f16_at(w) * float(sm.scale) * x.d), acc);
}

MK_AVX2 float dot_q4_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float offsets = 0;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q4_K::kBytes;
        const BlockQ8* x = xq + 8 * sb;
        for (int c = 0; c < 4; ++c) {  // 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high
            const __m256i raw = load32(w + 16 + 32 * c);
            acc0 = q4_k_sub(acc0, offsets, w, 2 * c, _mm256_and_si256(raw, low4), x[2 * c]);
            acc1 = q4_k_sub(acc1, offsets, w, 2 * c + 1, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4), x[2 * c + 1]);
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1)) - offsets;
}

// Q6_K group k = 4 * half + g (values 32k..32k+31) lines up with activation block 8 * sb + k. Its
// halves' int8 scales multiply the i16 pair sums in madd (values 0-15 are the low 128-bit lane).
MK_AVX2 __m256 q6_k_group(__m256 acc, const uint8_t* w, int half, int g, __m256i qh, const BlockQ8& x) {
    const __m256i ql = load32(w + 64 * half + 32 * (g % 2));
    const __m256i low = _mm256_and_si256(g < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(3));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
    const int k = 4 * half + g;
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(load32(x.q), q));
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(scales[2 * k + 1]), _mm_set1_epi16(scales[2 * k]));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, sc));
    return _mm256_fmadd_ps(s, _mm256_set1_ps(f16_at(w + 208) * x.d), acc);
}

MK_AVX2 float dot_q6_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q6_K::kBytes;
        const BlockQ8* x = xq + 8 * sb;
        for (int half = 0; half < 2; ++half) {
            const __m256i qh = load32(w + 128 + 32 * half);
            for (int g = 0; g < 4; g += 2) {
                acc0 = q6_k_group(acc0, w, half, g, qh, x[4 * half + g]);
                acc1 = q6_k_group(acc1, w, half, g + 1, qh, x[4 * half + g + 1]);
            }
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

void add_avx2_q8(CpuKernels& k) {
    k.quantize_q8 = quantize_q8;
    k.dot_q8[slot(DType::Q8_0)] = dot_blocks<StepQ8_0>;
    k.dot_q8[slot(DType::Q4_0)] = dot_blocks<StepQ4_0>;
    k.dot_q8[slot(DType::Q4_1)] = dot_blocks<StepQ4_1>;
    k.dot_q8[slot(DType::Q4_K)] = dot_q4_k;
    k.dot_q8[slot(DType::Q6_K)] = dot_q6_k;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_q8(CpuKernels&) {}
}  // namespace mk::quant

#endif

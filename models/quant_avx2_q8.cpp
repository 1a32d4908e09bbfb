// Fast-mode AVX2 kernels: the BlockQ8 activation quantizer and integer dots (maddubs: u8 x s8 pairs
// summed to i16, madd: i16 pairs to i32, exact) for Q8_0, Q4_0, Q4_1, Q4_K and Q6_K weights.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Same arithmetic as the scalar quantizer (quant_int_scalar.hpp): amax exact, one division, products
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

// Eight i32 lanes of sum(u * s) over the 32 byte pairs; u <= 128, |s| <= 127 keeps maddubs's i16
// pair sums (<= 32512) from saturating.
MK_AVX2 __m256 dot_u8_s8(__m256i u, __m256i s) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

// Signed weights: |w| as the unsigned side, x with w's sign as the signed side (exact products).
MK_AVX2 __m256 dot_s8_s8(__m256i w, __m256i x) { return dot_u8_s8(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }

struct StepQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr float kOffsetScale = 0;
    MK_AVX2 static void step(__m256& acc, __m128&, const uint8_t* w, const BlockQ8& x) {
        acc = _mm256_fmadd_ps(dot_s8_s8(load32(w + 2), load32(x.q)), block_scale(w, x), acc);
    }
};

// Q4_0 value = (q - 8) * d: d * dx * sum(q * qx) in lanes with q unsigned (no sign juggling), and
// -8 * d * (the block's activation sum) in the offset. With the sign trick (sub, abs, sign) Q4_0 ran
// at ~0.75x Q4_1's GB/s, now at ~0.95x (mk_dot_bench --formats Q4_0,Q4_1 --cols 576, same run).
struct StepQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr float kOffsetScale = -8;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ8& x) {
        const __m128 s = scales_d_d(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_u8_s8(unpack_nibbles(w + 2), load32(x.q)), _mm256_broadcastss_ps(s), acc);
    }
};

// Q4_1: d * dx * sum(q * qx) in lanes, plus m * (the block's activation sum) in the offset. Both
// scales from one conversion and one multiply (scales_d_m) and the broadcast nibble unpack took Q4_1
// from 16.7 to 20.9 GB/s (576 x 3072, cache-hot).
struct StepQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr float kOffsetScale = 1;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ8& x) {
        const __m128 s = scales_d_m(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_u8_s8(unpack_nibbles(w + 4), load32(x.q)), _mm256_broadcastss_ps(s), acc);
    }
};

// Q4_K sub-block j lines up with activation block 8 * sb + j. Its 6-bit scale multiplies the i16
// pair sums in madd; lanes then take d * dx_j. C is a template argument so the byte shuffles that
// broadcast scales 2C and 2C + 1 (i16 in `scales`) are constants.
template <int C>
MK_AVX2 inline void q4_k_pair(__m256& acc0, __m256& acc1, const uint8_t* w, __m256i scales, float d, const BlockQ8* x) {
    const __m256i raw = load32(w + 16 + 32 * C);  // sub-block 2C in the low nibbles, 2C + 1 in the high
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i sc0 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * (2 * C))));
    const __m256i sc1 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * (2 * C + 1))));
    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(raw, low4), load32(x[2 * C].q)), sc0);
    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4), load32(x[2 * C + 1].q)), sc1);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d * x[2 * C].d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d * x[2 * C + 1].d), acc1);
}

// The mins term, dmin * sum_j min_j * (block j's activation sum), goes to its own 8 lanes. Scales
// and mins stay in registers: unpacked through int arrays, the stores stalled the vector loads that
// read them back (6.7 GB/s; now 20.3, mk_dot_bench --formats Q4_K --cols 1536).
MK_AVX2 float dot_q4_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc_mins = acc0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q4_K::kBytes;
        const BlockQ8* x = xq + 8 * sb;
        uint64_t scale_bytes, min_bytes;
        unpack_scale_mins(w + 4, scale_bytes, min_bytes);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(scale_bytes))));
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(min_bytes))));
        const __m256 sums = _mm256_setr_ps(x[0].sum, x[1].sum, x[2].sum, x[3].sum, x[4].sum, x[5].sum, x[6].sum, x[7].sum);
        acc_mins = _mm256_fmadd_ps(_mm256_mul_ps(mins, _mm256_set1_ps(f16_at(w + 2))), sums, acc_mins);
        const float d = f16_at(w);
        q4_k_pair<0>(acc0, acc1, w, scales, d, x);
        q4_k_pair<1>(acc0, acc1, w, scales, d, x);
        q4_k_pair<2>(acc0, acc1, w, scales, d, x);
        q4_k_pair<3>(acc0, acc1, w, scales, d, x);
    }
    return hsum(_mm256_add_ps(acc0, acc1)) - hsum(acc_mins);
}

// Q6_K group k = 4 * half + G (values 32k..32k+31) lines up with activation block 8 * sb + k: low 4
// bits from ql (low or high nibble), top 2 from bits 2G..2G+1 of qh, minus 32. Its halves' int8
// scales multiply the i16 pair sums in madd (values 0-15 are the low 128-bit lane). G is a template
// argument so every shift is an immediate (with d hoisted: 9.5 -> 19.1 GB/s, --formats Q6_K).
template <int G>
MK_AVX2 inline __m256 q6_k_group(__m256 acc, const uint8_t* ql, __m256i qh, const int8_t* scales, float d, const BlockQ8& x) {
    const __m256i l = load32(ql + 32 * (G % 2));
    const __m256i low = _mm256_and_si256(G < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(G < 2 ? _mm256_slli_epi16(qh, 4 - 2 * G) : _mm256_srli_epi16(qh, 2 * G - 4),
                                          _mm256_set1_epi8(0x30));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(load32(x.q), q));
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(scales[2 * G + 1]), _mm_set1_epi16(scales[2 * G]));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, sc));
    return _mm256_fmadd_ps(s, _mm256_set1_ps(d * x.d), acc);
}

MK_AVX2 float dot_q6_k(const uint8_t* row, const BlockQ8* xq, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t* w = row + sb * Q6_K::kBytes;
        const float d = f16_at(w + 208);
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = w + 64 * half;
            const __m256i qh = load32(w + 128 + 32 * half);
            const auto* scales = reinterpret_cast<const int8_t*>(w + 192 + 8 * half);
            const BlockQ8* x = xq + 8 * sb + 4 * half;
            acc0 = q6_k_group<0>(acc0, ql, qh, scales, d, x[0]);
            acc1 = q6_k_group<1>(acc1, ql, qh, scales, d, x[1]);
            acc0 = q6_k_group<2>(acc0, ql, qh, scales, d, x[2]);
            acc1 = q6_k_group<3>(acc1, ql, qh, scales, d, x[3]);
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

void add_avx2_q8(CpuKernels& k) {
    k.quantize_q8 = quantize_q8;
    k.dot_q8[slot(DType::Q8_0)] = dot_blocks<StepQ8_0, BlockQ8>;
    k.dot_q8[slot(DType::Q4_0)] = dot_blocks<StepQ4_0, BlockQ8>;
    k.dot_q8[slot(DType::Q4_1)] = dot_blocks<StepQ4_1, BlockQ8>;
    k.dot_q8[slot(DType::Q4_K)] = dot_q4_k;
    k.dot_q8[slot(DType::Q6_K)] = dot_q6_k;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_q8(CpuKernels&) {}
}  // namespace mk::quant

#endif

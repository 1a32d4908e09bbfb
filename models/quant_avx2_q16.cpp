// Accurate fast-mode AVX2 kernels: the BlockQ16 activation quantizer and pmaddwd dots (i16 x i16
// pairs summed to i32, exact) for Q8_0, Q4_0 and Q4_1 weights widened to 16 bits, one column or several.
#include "models/quant_avx2.hpp"

#include <cstring>

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// Same arithmetic as the scalar quantizer (quant_q16.cpp), so the blocks are identical.
MK_AVX2 void quantize_q16(const float* x, int64_t n, BlockQ16* out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        const __m256 v0 = loadu(xb), v1 = loadu(xb + 8), v2 = loadu(xb + 16), v3 = loadu(xb + 24);
        const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3));
        const float amax = hmax(_mm256_max_ps(m01, m23));
        const __m256 id = _mm256_set1_ps(amax > 0 ? 32767 / amax : 0);
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
        const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        // packs interleaves the 128-bit lanes; the 64-bit permute puts values back in order.
        const __m256i q01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xd8);
        const __m256i q23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), q01);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q + 16), q23);
        out[b].d = amax / 32767;
        out[b].sum = out[b].d * float(sum);
    }
}

// Eight i32 lanes of sum(a * b) over two 16-value halves. Pair sums stay below 2 * 128 * 32767.
MK_AVX2 inline __m256 dot_i16(__m256i a0, __m256i a1, const BlockQ16& x) {
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(a0, load32(x.q)), _mm256_madd_epi16(a1, load32(x.q + 16)));
    return _mm256_cvtepi32_ps(p);
}

struct StepQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr float kOffsetScale = 0;
    MK_AVX2 static void step(__m256& acc, __m128&, const uint8_t* w, const BlockQ16& x) {
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
        acc = _mm256_fmadd_ps(dot_i16(w0, w1, x), block_scale(w, x), acc);
    }
};

// Q4_0 value = (q - 8) * d: q unsigned in the lanes, -8 * d * (activation sum) in the offset.
struct StepQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr float kOffsetScale = -8;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ16& x) {
        __m256i lo, hi;
        nibble_words(w + 2, lo, hi);
        const __m128 s = scales_d_d(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_i16(lo, hi, x), _mm256_broadcastss_ps(s), acc);
    }
};

// Q4_1 value = q * d + m: d * dx * sum(q * qx) in the lanes, m * (activation sum) in the offset.
struct StepQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr float kOffsetScale = 1;
    MK_AVX2 static void step(__m256& acc, __m128& offset, const uint8_t* w, const BlockQ16& x) {
        __m256i lo, hi;
        nibble_words(w + 4, lo, hi);
        const __m128 s = scales_d_m(w, x);
        offset = _mm_add_ps(offset, s);
        acc = _mm256_fmadd_ps(dot_i16(lo, hi, x), _mm256_broadcastss_ps(s), acc);
    }
};

// Several columns against one row: each weight block is widened once (W) and dotted with kCols columns, one
// accumulator each (the columns hide the FMA latency the single-column driver hides with two).
struct WideQ8_0 {
    static constexpr int kBytes = Q8_0::kBytes;
    static constexpr float kOffsetScale = 0;
    __m256i a0, a1;
    __m128 s;  // [d, 0, 0, 0]: the other lanes zero, not the quants read as f16 (denormals there made every
               // multiply a microcode assist: Llama-3.2-1B Q8_0 prefill ran at half the token-by-token speed)
    MK_AVX2 explicit WideQ8_0(const uint8_t* w)
        : a0(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)))),
          a1(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)))) {
        uint16_t d;
        std::memcpy(&d, w, 2);
        s = _mm_cvtph_ps(_mm_cvtsi32_si128(d));
    }
};
struct WideQ4_0 {
    static constexpr int kBytes = Q4_0::kBytes;
    static constexpr float kOffsetScale = -8;
    __m256i a0, a1;
    __m128 s;  // [d, d, -, -]
    MK_AVX2 explicit WideQ4_0(const uint8_t* w) {
        nibble_words(w + 2, a0, a1);
        uint16_t d;
        std::memcpy(&d, w, 2);
        s = _mm_moveldup_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
    }
};
struct WideQ4_1 {
    static constexpr int kBytes = Q4_1::kBytes;
    static constexpr float kOffsetScale = 1;
    __m256i a0, a1;
    __m128 s;  // [d, m, -, -]
    MK_AVX2 explicit WideQ4_1(const uint8_t* w) {
        nibble_words(w + 4, a0, a1);
        uint32_t dm;
        std::memcpy(&dm, w, 4);
        s = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dm)));
    }
};

// One column's block: acc += dot * (d dx), offset += [d dx, m sum] (Q4_1) or [d dx, d sum] (Q4_0).
template <typename W>
MK_AVX2 inline void add_block(const W& w, const BlockQ16& x, __m256& acc, __m128& offset) {
    const __m128 s = _mm_mul_ps(w.s, act_scales(x));
    if constexpr (W::kOffsetScale != 0) offset = _mm_add_ps(offset, s);
    acc = _mm256_fmadd_ps(dot_i16(w.a0, w.a1, x), _mm256_broadcastss_ps(s), acc);
}

template <typename W>
MK_AVX2 inline float finish(__m256 acc, __m128 offset) {
    return hsum(acc) + W::kOffsetScale * _mm_cvtss_f32(_mm_movehdup_ps(offset));
}

// Four columns per pass, their accumulators named (not an array: GCC kept an array on the stack, and the store
// to reload chain was a third of the kernel's time in perf).
template <typename W>
MK_AVX2 void dot_cols(const uint8_t* row, const BlockQ16* xq, int64_t n, int64_t x_stride, uint32_t n_cols, float* out,
                      size_t out_stride) {
    const int64_t n_blocks = n / 32;
    uint32_t c = 0;
    for (; c + 4 <= n_cols; c += 4) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        __m128 off0 = _mm_setzero_ps(), off1 = off0, off2 = off0, off3 = off0;
        const BlockQ16* x0 = xq + int64_t(c) * x_stride;
        const BlockQ16 *x1 = x0 + x_stride, *x2 = x1 + x_stride, *x3 = x2 + x_stride;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const W w(row + b * W::kBytes);
            add_block(w, x0[b], acc0, off0);
            add_block(w, x1[b], acc1, off1);
            add_block(w, x2[b], acc2, off2);
            add_block(w, x3[b], acc3, off3);
        }
        out[c * out_stride] = finish<W>(acc0, off0);
        out[(c + 1) * out_stride] = finish<W>(acc1, off1);
        out[(c + 2) * out_stride] = finish<W>(acc2, off2);
        out[(c + 3) * out_stride] = finish<W>(acc3, off3);
    }
    for (; c < n_cols; ++c) {  // the rest one at a time
        __m256 acc = _mm256_setzero_ps();
        __m128 offset = _mm_setzero_ps();
        const BlockQ16* x = xq + int64_t(c) * x_stride;
        for (int64_t b = 0; b < n_blocks; ++b) add_block(W(row + b * W::kBytes), x[b], acc, offset);
        out[c * out_stride] = finish<W>(acc, offset);
    }
}

}  // namespace

void add_avx2_q16(CpuKernels& k) {
    k.dot_q16_cols[slot(DType::Q8_0)] = dot_cols<WideQ8_0>;
    k.dot_q16_cols[slot(DType::Q4_0)] = dot_cols<WideQ4_0>;
    k.dot_q16_cols[slot(DType::Q4_1)] = dot_cols<WideQ4_1>;
    k.quantize_q16 = quantize_q16;
    k.dot_q16[slot(DType::Q8_0)] = dot_blocks<StepQ8_0, BlockQ16>;
    k.dot_q16[slot(DType::Q4_0)] = dot_blocks<StepQ4_0, BlockQ16>;
    k.dot_q16[slot(DType::Q4_1)] = dot_blocks<StepQ4_1, BlockQ16>;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_q16(CpuKernels&) {}
}  // namespace mk::quant

#endif

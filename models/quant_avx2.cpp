// Exact-mode AVX2 dots for F32, F16, BF16, Q8_0, Q4_0 and Q4_1: fp32 activations, weights converted
// to fp32 in registers, fp32 accumulation in 8-lane vectors reduced in a fixed order.
#include "models/quant_avx2.hpp"

#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)

namespace mk::quant {

namespace {

using namespace avx2;

// 8 consecutive plain values as fp32 lanes.
struct LoadF32 {
    static constexpr int kBytes = 4;
    MK_AVX2 static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct LoadF16 {
    static constexpr int kBytes = 2;
    MK_AVX2 static __m256 load(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
};
struct LoadBF16 {
    static constexpr int kBytes = 2;
    MK_AVX2 static __m256 load(const uint8_t* p) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
};

// Four accumulators hide the FMA latency (one: F32 54, BF16 24.5, F16 29.6 GB/s; four: 68, 41, 44;
// mk_dot_bench --formats F32,BF16,F16 --cols 576 --rows 1024) and cut each lane's sum to n / 32
// terms. The tail (n % 8 values) is zero-padded into one more vector, so any n works.
template <typename L>
MK_AVX2 float dot_plain(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(L::load(row + i * L::kBytes), loadu(x + i), acc0);
        acc1 = _mm256_fmadd_ps(L::load(row + (i + 8) * L::kBytes), loadu(x + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(L::load(row + (i + 16) * L::kBytes), loadu(x + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(L::load(row + (i + 24) * L::kBytes), loadu(x + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(L::load(row + i * L::kBytes), loadu(x + i), acc0);
    if (i < n) {
        alignas(32) uint8_t w_tail[32] = {};
        alignas(32) float x_tail[8] = {};
        std::memcpy(w_tail, row + i * L::kBytes, size_t(n - i) * L::kBytes);
        std::memcpy(x_tail, x + i, size_t(n - i) * sizeof(float));
        acc1 = _mm256_fmadd_ps(L::load(w_tail), loadu(x_tail), acc1);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

// Q8_0 and Q4_0 values are small integers times d, so the block's sum of q * x is formed first and
// scaled once (q * d is exact in fp32, so this only moves a rounding).
MK_AVX2 float dot_q8_0(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q8_0::kBytes;
        const float* xb = x + b * 32;
        // (No lambdas here: they would not inherit the target attribute.)
        __m256 t0 = _mm256_mul_ps(i8_to_ps(load64(w + 2)), loadu(xb));
        __m256 t1 = _mm256_mul_ps(i8_to_ps(load64(w + 10)), loadu(xb + 8));
        t0 = _mm256_fmadd_ps(i8_to_ps(load64(w + 18)), loadu(xb + 16), t0);
        t1 = _mm256_fmadd_ps(i8_to_ps(load64(w + 26)), loadu(xb + 24), t1);
        acc = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), _mm256_set1_ps(f16_at(w)), acc);
    }
    return hsum(acc);
}

MK_AVX2 float dot_q4_0(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_0::kBytes;
        const float* xb = x + b * 32;
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low4), eight);                      // values 0-15
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight);  // 16-31
        __m256 t0 = _mm256_mul_ps(i8_to_ps(lo), loadu(xb));
        __m256 t1 = _mm256_mul_ps(i8_to_ps(high64(lo)), loadu(xb + 8));
        t0 = _mm256_fmadd_ps(i8_to_ps(hi), loadu(xb + 16), t0);
        t1 = _mm256_fmadd_ps(i8_to_ps(high64(hi)), loadu(xb + 24), t1);
        acc = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), _mm256_set1_ps(f16_at(w)), acc);
    }
    return hsum(acc);
}

// Q4_1 values are dequantized (q * d + m, one FMA) before the dot, as the scalar kernel does; one
// accumulator per 8-value chunk keeps the FMA chains independent.
MK_AVX2 float dot_q4_1(const uint8_t* row, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* w = row + b * Q4_1::kBytes;
        const float* xb = x + b * 32;
        const __m256 d = _mm256_set1_ps(f16_at(w)), m = _mm256_set1_ps(f16_at(w + 2));
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 4));
        const __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
        acc0 = _mm256_fmadd_ps(_mm256_fmadd_ps(u8_to_ps(lo), d, m), loadu(xb), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_fmadd_ps(u8_to_ps(high64(lo)), d, m), loadu(xb + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_fmadd_ps(u8_to_ps(hi), d, m), loadu(xb + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_fmadd_ps(u8_to_ps(high64(hi)), d, m), loadu(xb + 24), acc3);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

}  // namespace

void add_avx2_dots(CpuKernels& k) {
    k.dot[slot(DType::F32)] = dot_plain<LoadF32>;
    k.dot[slot(DType::F16)] = dot_plain<LoadF16>;
    k.dot[slot(DType::BF16)] = dot_plain<LoadBF16>;
    k.dot[slot(DType::Q8_0)] = dot_q8_0;
    k.dot[slot(DType::Q4_0)] = dot_q4_0;
    k.dot[slot(DType::Q4_1)] = dot_q4_1;
}

}  // namespace mk::quant

#else

namespace mk::quant {
void add_avx2_dots(CpuKernels&) {}
}  // namespace mk::quant

#endif

// Block formats: hand-built blocks of every format against hand-worked values, dot_row against a
// float64 reference, quantize -> dequantize error bounds, f16/bf16 conversion edge cases, and the CPU
// kernels (every ISA present, exact and q16 modes) against the scalar kernels and float64.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "models/error.hpp"
#include "models/quant.hpp"

using Catch::Matchers::Contains;
using mk::DType;

namespace {

const DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};

std::vector<float> dequantize(DType dtype, const std::vector<uint8_t>& bytes, int64_t n) {
    std::vector<float> out(size_t(n), std::nanf(""));
    mk::dequantize_row(dtype, bytes.data(), out.data(), n);
    return out;
}

std::vector<float> random_values(size_t n, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = uniform(rng);
    return v;
}

void check_values(const std::vector<float>& got, const std::vector<float>& expected) {
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("value " << i);
        REQUIRE(got[i] == expected[i]);
    }
}

}  // namespace

TEST_CASE("quant: traits and row sizes", "[cpu]") {
    CHECK(mk::dtype_traits(DType::Q8_0).block_bytes == 34);
    CHECK(mk::dtype_traits(DType::Q4_K).block_values == 256);
    CHECK(mk::dtype_name(DType::Q6_K) == "Q6_K");
    CHECK(mk::row_bytes(DType::Q4_1, 576) == 18 * 20);
    CHECK(mk::row_bytes(DType::Q6_K, 512) == 420);
    CHECK(mk::row_bytes(DType::BF16, 3) == 6);
    CHECK(mk::is_supported_dtype(30));
    CHECK_FALSE(mk::is_supported_dtype(6));
    CHECK_THROWS_WITH(mk::dtype_traits(DType(6)), "unsupported tensor type 6");
    CHECK_THROWS_WITH(mk::row_bytes(DType::Q4_K, 100), "a Q4_K row of 100 values is not a whole number of 256-value blocks");
    float out[64];
    uint8_t block[68] = {};
    CHECK_THROWS_AS(mk::dequantize_row(DType::Q8_0, block, out, 33), mk::Error);
}

TEST_CASE("quant: hand-built plain float values", "[cpu]") {
    check_values(dequantize(DType::F32, {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x20, 0xc1}, 2), {1.5f, -10.0f});
    // 0x3c00 = 1, 0xc000 = -2, 0x7bff = 65504, 0x0001 = 2^-24, 0x3555 = (1 + 341/1024) / 4.
    check_values(dequantize(DType::F16, {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x55, 0x35}, 5),
                 {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), 1365.0f / 4096});
    // 0x3f80 = 1, 0xc0a0 = -5, 0x4049 = 3.140625.
    check_values(dequantize(DType::BF16, {0x80, 0x3f, 0xa0, 0xc0, 0x49, 0x40}, 3), {1.0f, -5.0f, 3.140625f});
}

TEST_CASE("quant: hand-built Q8_0 block", "[cpu]") {
    std::vector<uint8_t> block = {0x00, 0x38};  // d = 0.5
    std::vector<float> expected;
    for (int i = 0; i < 32; ++i) {
        block.push_back(uint8_t(int8_t(8 * i - 128)));  // q = -128, -120, ..., 120
        expected.push_back(float(4 * i - 64));
    }
    check_values(dequantize(DType::Q8_0, block, 32), expected);
}

TEST_CASE("quant: hand-built Q4_0 block", "[cpu]") {
    std::vector<uint8_t> block = {0x00, 0x40};  // d = 2
    std::vector<float> expected(32);
    for (int j = 0; j < 16; ++j) {
        block.push_back(uint8_t(j | ((15 - j) << 4)));  // value j: q = j; value j + 16: q = 15 - j
        expected[j] = float((j - 8) * 2);
        expected[j + 16] = float((7 - j) * 2);
    }
    check_values(dequantize(DType::Q4_0, block, 32), expected);
}

TEST_CASE("quant: hand-built Q4_1 block", "[cpu]") {
    std::vector<uint8_t> block = {0x00, 0x38, 0x00, 0xbc};  // d = 0.5, m = -1
    std::vector<float> expected(32);
    for (int j = 0; j < 16; ++j) {
        block.push_back(uint8_t((15 - j) | (j << 4)));
        expected[j] = float(15 - j) * 0.5f - 1;
        expected[j + 16] = float(j) * 0.5f - 1;
    }
    check_values(dequantize(DType::Q4_1, block, 32), expected);
}

TEST_CASE("quant: hand-built Q4_K block", "[cpu]") {
    // d = 1, dmin = 0.5; sub-block scales {1, 2, 3, 63, 17, 33, 48, 5}, mins {0, 1, 10, 20, 16, 40, 63, 2}.
    // Bytes 0-3: scale j | (scale j+4 >> 4) << 6; bytes 4-7: min j | (min j+4 >> 4) << 6;
    // bytes 8-11: (scale j+4 & 15) | (min j+4 & 15) << 4.
    const int scale[8] = {1, 2, 3, 63, 17, 33, 48, 5}, min[8] = {0, 1, 10, 20, 16, 40, 63, 2};
    std::vector<uint8_t> block = {0x00, 0x3c, 0x00, 0x38, 0x41, 0x82, 0xc3, 0x3f, 0x40, 0x81, 0xca, 0x14, 0x01, 0x81, 0xf0, 0x25};
    auto q = [](int j, int l) { return (l + 3 * j) % 16; };
    // Bytes 32c..32c+31 of the nibbles: sub-block 2c in the low nibbles, 2c+1 in the high ones.
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) block.push_back(uint8_t(q(2 * c, l) | (q(2 * c + 1, l) << 4)));
    REQUIRE(block.size() == 144);
    std::vector<float> expected(256);
    for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) expected[32 * j + l] = float(scale[j] * q(j, l)) - 0.5f * float(min[j]);
    CHECK(expected[32 * 5] == 33 * 15 - 20);
    check_values(dequantize(DType::Q4_K, block, 256), expected);
}

TEST_CASE("quant: hand-built Q6_K block", "[cpu]") {
    std::vector<uint8_t> block(210, 0);
    uint8_t* ql = block.data();
    uint8_t* qh = block.data() + 128;
    auto* scales = reinterpret_cast<int8_t*>(block.data() + 192);
    for (int i = 0; i < 16; ++i) scales[i] = 1;
    scales[2] = 2, scales[4] = 3, scales[6] = -1, scales[8] = 4, scales[12] = -5;
    block[208] = 0x00, block[209] = 0x38;  // d = 0.5
    ql[0] = 0x5a;  // value 0 low bits 0xa, value 64 low bits 0x5
    qh[0] = 0xe4;  // top bits: value 0 -> 0, value 32 -> 1, value 64 -> 2, value 96 -> 3
    ql[64 + 5] = 0x3f;  // second half, lane 5: value 133 low bits 0xf, value 197 low bits 0x3
    qh[32 + 5] = 0x12;  // value 133 -> 2, value 165 -> 0, value 197 -> 1, value 229 -> 0
    // Every other value has q = 0, i.e. (0 - 32) * 0.5 * scale.
    std::vector<float> expected(256);
    for (int v = 0; v < 256; ++v) expected[v] = -16.0f * float(scales[v / 16]);
    expected[0] = (10 - 32) * 0.5f;          // -11
    expected[32] = (16 - 32) * 0.5f * 2;     // -16
    expected[64] = (37 - 32) * 0.5f * 3;     // 7.5
    expected[96] = (48 - 32) * 0.5f * -1;    // -8
    expected[133] = (47 - 32) * 0.5f * 4;    // 30
    expected[197] = (19 - 32) * 0.5f * -5;   // 32.5
    check_values(dequantize(DType::Q6_K, block, 256), expected);
}

TEST_CASE("quant: dot_row equals a float64 dot of the dequantized row", "[cpu]") {
    const int64_t n = 1792;  // 7 super-blocks
    // A positive bias keeps the dot far from zero, so a relative tolerance is meaningful.
    auto source = random_values(size_t(n), -0.5f, 1.5f, 11);
    auto x = random_values(size_t(n), 0.25f, 1.25f, 12);
    for (DType dtype : kAllDTypes) {
        INFO(mk::dtype_name(dtype));
        std::vector<uint8_t> bytes(mk::row_bytes(dtype, n));
        mk::quantize_row(dtype, source.data(), bytes.data(), n);
        auto row = dequantize(dtype, bytes, n);
        double reference = 0;
        for (int64_t i = 0; i < n; ++i) reference += double(row[size_t(i)]) * double(x[size_t(i)]);
        double got = mk::dot_row(dtype, bytes.data(), x.data(), n);
        CHECK(reference > 100);
        CHECK(std::fabs(got - reference) <= 1e-5 * std::fabs(reference));
    }
}

TEST_CASE("quant: quantize -> dequantize stays within each format's error bound", "[cpu]") {
    const int64_t n = 4096;
    auto source = random_values(size_t(n), -1, 1, 21);
    for (float& v : source) v *= v > 0 ? 2.0f : 1.0f;  // asymmetric: [-1, 2)
    for (DType dtype : kAllDTypes) {
        INFO(mk::dtype_name(dtype));
        std::vector<uint8_t> bytes(mk::row_bytes(dtype, n));
        mk::quantize_row(dtype, source.data(), bytes.data(), n);
        auto got = dequantize(dtype, bytes, n);
        const int block = mk::dtype_traits(dtype).block_values == 1 ? 32 : mk::dtype_traits(dtype).block_values;
        for (int64_t b0 = 0; b0 < n; b0 += block) {
            float lo = 0, hi = 0, amax = 0;
            for (int64_t i = b0; i < b0 + block; ++i)
                lo = std::min(lo, source[i]), hi = std::max(hi, source[i]), amax = std::max(amax, std::fabs(source[i]));
            for (int64_t i = b0; i < b0 + block; ++i) {
                float x = source[size_t(i)], err = std::fabs(got[size_t(i)] - x), bound = 0;
                switch (dtype) {
                    case DType::F32: bound = 0; break;
                    case DType::F16: bound = std::max(std::fabs(x) * 0x1p-11f, 0x1p-25f); break;
                    case DType::BF16: bound = std::fabs(x) * 0x1p-8f; break;
                    case DType::Q8_0: bound = 0.5f * amax / 127 * 1.002f; break;
                    case DType::Q4_0: bound = amax / 8 * 1.005f; break;  // the short side of [-8, 7]
                    case DType::Q4_1: bound = 0.5f * (hi - lo) / 15 * 1.02f + amax * 0x1p-11f; break;
                    // Scales are rounded up to 6 (Q4_K) or 8 (Q6_K) bits of the super-block's largest step.
                    case DType::Q4_K: bound = 0.5f * ((hi - lo) / 15 + (hi - lo) / 15 / 63 + -lo / 63) * 1.01f; break;
                    case DType::Q6_K: bound = 0.5f * (amax / 31 + amax / 31 / 127) * 1.01f; break;
                }
                INFO("value " << i << ": " << x << " -> " << got[size_t(i)]);
                REQUIRE(err <= bound);
            }
        }
    }
}

TEST_CASE("quant: zero and constant rows survive quantization", "[cpu]") {
    for (DType dtype : kAllDTypes) {
        INFO(mk::dtype_name(dtype));
        for (float c : {0.0f, 0.75f, -3.0f}) {
            std::vector<float> source(256, c);
            std::vector<uint8_t> bytes(mk::row_bytes(dtype, 256));
            mk::quantize_row(dtype, source.data(), bytes.data(), 256);
            for (float v : dequantize(dtype, bytes, 256)) REQUIRE(std::fabs(v - c) <= std::fabs(c) * 0.01f);
        }
    }
}

TEST_CASE("quant: f16 conversion edge cases", "[cpu]") {
    using mk::f16_to_f32;
    using mk::f32_to_f16;
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(f32_to_f16(1.0f) == 0x3c00);
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(65504.0f) == 0x7bff);
    CHECK(f32_to_f16(65519.0f) == 0x7bff);  // below the halfway point 65520
    CHECK(f32_to_f16(65520.0f) == 0x7c00);  // the tie rounds to even, which is past the largest finite
    CHECK(f32_to_f16(1e10f) == 0x7c00);
    CHECK(f32_to_f16(-inf) == 0xfc00);
    uint16_t nan = f32_to_f16(std::nanf(""));
    CHECK(((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0));
    CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);              // tie, to even (down)
    CHECK(f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);          // tie, to even (up)
    CHECK(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);   // just above the tie
    CHECK(f32_to_f16(0x1p-14f) == 0x0400);                     // smallest normal
    CHECK(f32_to_f16(0x1p-24f) == 0x0001);                     // smallest subnormal
    CHECK(f32_to_f16(0x1p-25f) == 0x0000);                     // tie, to even (zero)
    CHECK(f32_to_f16(0x1p-25f * 1.0001f) == 0x0001);
    CHECK(f32_to_f16(3 * 0x1p-25f) == 0x0002);                 // 1.5 units: tie, to even
    CHECK(f32_to_f16(1023 * 0x1p-24f) == 0x03ff);              // largest subnormal
    CHECK(f32_to_f16(1023.5f * 0x1p-24f) == 0x0400);           // rounds up into the normals
    CHECK(f32_to_f16(-0x1p-30f) == 0x8000);
    CHECK(f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    CHECK(f16_to_f32(0x7c00) == inf);
    CHECK(std::isnan(f16_to_f32(0x7e01)));
    CHECK(std::signbit(f16_to_f32(0x8000)));
    // Every non-nan half survives f16 -> f32 -> f16 exactly; nans stay nans.
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = f16_to_f32(uint16_t(h));
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        REQUIRE(std::isnan(f) == is_nan);
        if (!is_nan) REQUIRE(f32_to_f16(f) == h);
    }
#if defined(__FLT16_MANT_DIG__)
    // The compiler's _Float16 conversion (round to nearest even) is an independent oracle.
    std::mt19937 rng(5);
    for (int i = 0; i < 200000; ++i) {
        auto f = std::bit_cast<float>(uint32_t(rng()));
        if (std::isnan(f)) continue;
        INFO(f);
        REQUIRE(f32_to_f16(f) == std::bit_cast<uint16_t>(static_cast<_Float16>(f)));
    }
#endif
}

TEST_CASE("quant: bf16 conversion edge cases", "[cpu]") {
    using mk::bf16_to_f32;
    using mk::f32_to_bf16;
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);      // tie, to even (down)
    CHECK(f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie, to even (up)
    CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
    CHECK(f32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
    CHECK(f32_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(f32_to_bf16(0x1p-133f) == 0x0001);  // bf16 keeps f32's subnormals
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
    // A nan whose payload sits only in the low 16 bits must not truncate to inf.
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
    for (uint32_t b = 0; b < 65536; ++b) {
        float f = bf16_to_f32(uint16_t(b));
        if (!std::isnan(f)) REQUIRE(f32_to_bf16(f) == b);
    }
}

// ---- CPU kernels: every ISA this CPU has against the scalar kernels and a float64 reference.

namespace {

std::vector<mk::CpuIsa> present_isas() {
    std::vector<mk::CpuIsa> isas = {mk::CpuIsa::Scalar};
    if (mk::cpu_has_isa(mk::CpuIsa::Avx2)) isas.push_back(mk::CpuIsa::Avx2);
    if (mk::cpu_has_isa(mk::CpuIsa::Avx512)) isas.push_back(mk::CpuIsa::Avx512);
    return isas;
}

// Row lengths that exercise whole and partial unrolled groups: 1, 2, 7 and 33 blocks, and for plain
// floats odd lengths that leave vector tails.
std::vector<int64_t> test_lengths(DType dtype) {
    const int64_t block = mk::dtype_traits(dtype).block_values;
    if (block == 1) return {1, 3, 8, 13, 31, 32, 33, 64, 100, 576, 1056, 1543};
    return {block, 2 * block, 7 * block, 33 * block};
}

struct RandomRow {
    std::vector<uint8_t> bytes;
    std::vector<float> values;  // dequantized
};

RandomRow random_row(DType dtype, int64_t n, float lo, float hi, uint32_t seed) {
    RandomRow r{std::vector<uint8_t>(mk::row_bytes(dtype, n)), {}};
    auto source = random_values(size_t(n), lo, hi, seed);
    mk::quantize_row(dtype, source.data(), r.bytes.data(), n);
    r.values = dequantize(dtype, r.bytes, n);
    return r;
}

double dot64(const std::vector<float>& a, const float* b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * double(b[i]);
    return sum;
}

}  // namespace

TEST_CASE("quant: the dispatch reports the active ISA", "[cpu]") {
    const std::string name = mk::cpu_isa_name();
    INFO("active ISA: " << name);
    CHECK(name == mk::cpu_isa_name(mk::cpu_isa()));
    CHECK(mk::cpu_has_isa(mk::CpuIsa::Scalar));
    const char* env = std::getenv("MK_CPU_ISA");
    if (env && std::string(env) == "scalar") CHECK(name == "scalar");
    else if (env && std::string(env) == "avx2") CHECK(name == "avx2");
    else if (mk::cpu_has_isa(mk::CpuIsa::Avx512)) CHECK(name == "avx512");
    else if (mk::cpu_has_isa(mk::CpuIsa::Avx2)) CHECK(name == "avx2");
    if (!mk::cpu_has_isa(mk::CpuIsa::Avx2)) {
        float x[32] = {};
        uint8_t row[34] = {};
        CHECK_THROWS_AS(mk::dot_row(mk::CpuIsa::Avx2, DType::Q8_0, row, x, 32), mk::Error);
    }
}

TEST_CASE("quant: every ISA's exact dot matches the scalar dot and float64", "[cpu]") {
    for (DType dtype : kAllDTypes) {
        for (int64_t n : test_lengths(dtype)) {
            const RandomRow row = random_row(dtype, n, -0.5f, 1.5f, uint32_t(100 + n));
            const auto x = random_values(size_t(n), 0.25f, 1.25f, uint32_t(200 + n));
            const double reference = dot64(row.values, x.data());
            const float scalar = mk::dot_row(mk::CpuIsa::Scalar, dtype, row.bytes.data(), x.data(), n);
            for (mk::CpuIsa isa : present_isas()) {
                INFO(mk::dtype_name(dtype) << " n=" << n << " " << mk::cpu_isa_name(isa));
                const float got = mk::dot_row(isa, dtype, row.bytes.data(), x.data(), n);
                CHECK(std::fabs(got - reference) <= 1e-5 * std::fabs(reference));
                CHECK(std::fabs(got - scalar) <= 2e-5 * std::fabs(reference));
                CHECK(got == mk::dot_row(isa, dtype, row.bytes.data(), x.data(), n));  // deterministic
            }
        }
    }
}

// The integer-dot mode (q16). Limits: the rms and max error the zero-mean test below allows (measured
// over 2000 rows, 576 and 1536 columns, every format: ~2e-5 for both; the removed q8 mode measured rms
// 5.2e-3 to 5.5e-3 of the dots' rms and max 4.7e-3 to 6.4e-3 of max |dot|).
struct Q16Mode {
    using Block = mk::BlockQ16;
    static constexpr int kLevels = 32767;
    static constexpr double kRmsLimit = 1e-4, kMaxLimit = 1e-4;
    static bool has(DType d) { return mk::has_q16_dot(d); }
    static void quantize(mk::CpuIsa isa, const float* x, int64_t n, Block* out) { mk::quantize_activations_q16(isa, x, n, out); }
    static float dot(mk::CpuIsa isa, DType d, const void* row, const Block* xq, int64_t n) { return mk::dot_row_q16(isa, d, row, xq, n); }
};

TEMPLATE_TEST_CASE("quant: integer-dot activations are identical on every ISA and within d / 2", "[cpu]", Q16Mode) {
    using Block = typename TestType::Block;
    const int64_t n = 33 * 32;
    auto x = random_values(size_t(n), -3, 2, 31);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0, q = 0
    x[100] = 1e-30f, x[7] = -50;                      // a tiny value, an outlier
    std::vector<Block> scalar(size_t(n / 32));
    TestType::quantize(mk::CpuIsa::Scalar, x.data(), n, scalar.data());
    for (size_t b = 0; b < scalar.size(); ++b) {
        INFO("block " << b);
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const float v = x[32 * b + size_t(i)];
            REQUIRE(std::fabs(float(scalar[b].q[i]) * scalar[b].d - v) <= scalar[b].d * 0.5001f);
            REQUIRE(std::abs(int(scalar[b].q[i])) <= TestType::kLevels);
            sum += scalar[b].q[i];
        }
        REQUIRE(scalar[b].sum == scalar[b].d * float(sum));
    }
    CHECK(scalar[1].d == 0);
    CHECK(scalar[0].q[7] == -TestType::kLevels);
    for (mk::CpuIsa isa : present_isas()) {
        INFO(mk::cpu_isa_name(isa));
        std::vector<Block> got(scalar.size());
        TestType::quantize(isa, x.data(), n, got.data());
        CHECK(std::memcmp(got.data(), scalar.data(), got.size() * sizeof(Block)) == 0);
    }
    CHECK_THROWS_WITH(TestType::quantize(mk::cpu_isa(), x.data(), 33, scalar.data()), Contains("not a whole number"));
    CHECK_FALSE(TestType::has(DType::F16));
    CHECK(TestType::has(DType::Q4_1));
    CHECK_THROWS_WITH(TestType::dot(mk::cpu_isa(), DType::BF16, x.data(), scalar.data(), 32), Contains("check has_q16_dot"));
}

TEMPLATE_TEST_CASE("quant: integer dots are exact on the quantized activations and within the rounding bound", "[cpu]", Q16Mode) {
    for (DType dtype : kAllDTypes) {
        if (!TestType::has(dtype)) continue;
        for (int64_t n : test_lengths(dtype)) {
            // Zero-mean weights and activations, as in a real model: the dots cancel.
            const RandomRow row = random_row(dtype, n, -1, 1, uint32_t(300 + n));
            const auto x = random_values(size_t(n), -2, 2, uint32_t(400 + n));
            std::vector<typename TestType::Block> xq(size_t(n / 32));
            TestType::quantize(mk::cpu_isa(), x.data(), n, xq.data());
            // On the quantized activations the kernels are exact up to fp32 rounding ...
            double on_q = 0, on_q_abs = 0, bound = 0, abs_products = 0;
            for (int64_t i = 0; i < n; ++i) {
                const auto& blk = xq[size_t(i / 32)];
                const double w = row.values[size_t(i)], xi = double(blk.q[i % 32]) * blk.d;
                on_q += w * xi;
                on_q_abs += std::fabs(w * xi);
                abs_products += std::fabs(w * x[size_t(i)]);
                bound += std::fabs(w) * blk.d / 2;  // ... and x's rounding moves each product by <= |w| d / 2
            }
            const double reference = dot64(row.values, x.data());
            const float scalar = TestType::dot(mk::CpuIsa::Scalar, dtype, row.bytes.data(), xq.data(), n);
            for (mk::CpuIsa isa : present_isas()) {
                INFO(mk::dtype_name(dtype) << " n=" << n << " " << mk::cpu_isa_name(isa));
                const float got = TestType::dot(isa, dtype, row.bytes.data(), xq.data(), n);
                CHECK(std::fabs(got - on_q) <= 1e-5 * on_q_abs);
                CHECK(std::fabs(got - scalar) <= 2e-5 * on_q_abs);
                CHECK(std::fabs(got - reference) <= bound + 1e-5 * abs_products);
                CHECK(got == TestType::dot(isa, dtype, row.bytes.data(), xq.data(), n));
            }
        }
    }
}

TEMPLATE_TEST_CASE("quant: integer dots' error on zero-mean random data, as logits see it", "[cpu]", Q16Mode) {
    const int64_t n = 1536, n_rows = 300;
    std::mt19937 rng(41);
    std::normal_distribution<float> normal(0, 1);
    std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    std::vector<typename TestType::Block> xq(size_t(n / 32));
    TestType::quantize(mk::cpu_isa(), x.data(), n, xq.data());
    for (DType dtype : kAllDTypes) {
        if (!TestType::has(dtype)) continue;
        INFO(mk::dtype_name(dtype));
        std::vector<uint8_t> bytes(mk::row_bytes(dtype, n));
        double sum_sq_err = 0, sum_sq_ref = 0, max_err = 0, max_ref = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
            for (float& v : w) v = normal(rng);
            mk::quantize_row(dtype, w.data(), bytes.data(), n);
            const double reference = dot64(dequantize(dtype, bytes, n), x.data());
            const double err = std::fabs(TestType::dot(mk::cpu_isa(), dtype, bytes.data(), xq.data(), n) - reference);
            sum_sq_err += err * err, sum_sq_ref += reference * reference;
            max_err = std::max(max_err, err), max_ref = std::max(max_ref, std::fabs(reference));
        }
        CHECK(std::sqrt(sum_sq_err / sum_sq_ref) < TestType::kRmsLimit);
        CHECK(max_err / max_ref < TestType::kMaxLimit);
    }
}

TEST_CASE("quant: integer dots do not overflow on extreme Q8_0 weights", "[cpu]") {
    // q = -128 (which mk's quantizer never writes but other files may) against full-scale activations:
    // pmaddwd's pair sums of 128 * 32767 stay far inside int32.
    const int64_t n = 64;
    std::vector<uint8_t> row(mk::row_bytes(DType::Q8_0, n));
    for (int b = 0; b < 2; ++b) {
        row[size_t(34 * b)] = 0x00, row[size_t(34 * b + 1)] = 0x3c;  // d = 1
        for (int i = 0; i < 32; ++i) row[size_t(34 * b + 2 + i)] = uint8_t(int8_t(b == 0 ? -128 : (i % 2 ? 127 : -128)));
    }
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = i % 3 ? -1.0f : 1.0f;
    std::vector<mk::BlockQ16> xq16(2);
    mk::quantize_activations_q16(x.data(), n, xq16.data());
    const double reference = dot64(dequantize(DType::Q8_0, row, n), x.data());  // x is exact in q16
    for (mk::CpuIsa isa : present_isas()) {
        INFO(mk::cpu_isa_name(isa));
        CHECK(mk::dot_row_q16(isa, DType::Q8_0, row.data(), xq16.data(), n) == Approx(reference).epsilon(1e-6));
        CHECK(mk::dot_row(isa, DType::Q8_0, row.data(), x.data(), n) == Approx(reference).epsilon(1e-6));
    }
}

TEST_CASE("quant: a row against several columns equals one dot per column", "[cpu]") {
    // dot_row_q16_cols (prefill) decodes each weight block once for 4 columns; 1..9 columns cover the groups of
    // 4 and the rest, strided input blocks and a strided output.
    const int64_t n = 256;
    for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        std::vector<uint8_t> row(mk::row_bytes(dtype, n));
        const std::vector<float> w = random_values(size_t(n), -1.0f, 1.0f, 7);
        mk::quantize_row(dtype, w.data(), row.data(), n);
        for (uint32_t cols = 1; cols <= 9; ++cols) {
            const int64_t stride = n / 32 + 1;  // a gap after each column's blocks
            std::vector<mk::BlockQ16> xq(size_t(stride * cols));
            for (uint32_t c = 0; c < cols; ++c) {
                const std::vector<float> x = random_values(size_t(n), -2.0f, 2.0f, 100 + c);
                mk::quantize_activations_q16(x.data(), n, xq.data() + c * stride);
            }
            std::vector<float> out(2 * cols, -7.0f);
            mk::dot_row_q16_cols(dtype, row.data(), xq.data(), n, stride, cols, out.data(), 2);
            for (uint32_t c = 0; c < cols; ++c) {
                INFO(mk::dtype_name(dtype) << " " << cols << " columns, column " << c);
                const float one = mk::dot_row_q16(dtype, row.data(), xq.data() + c * stride, n);
                CHECK(out[2 * c] == Approx(one).epsilon(1e-5).margin(1e-5));
                CHECK(out[2 * c + 1] == -7.0f);  // the stride's gaps stay untouched
            }
        }
    }
}

namespace {

// The float64 dot of a decoded weight row with a column of q16 blocks (value q * d), and the sum of the products'
// magnitudes, which bounds fp32 rounding.
struct QuantDot {
    double dot = 0, magnitude = 0;
};
QuantDot quant_dot(const std::vector<float>& w, const mk::BlockQ16* x, int64_t n) {
    QuantDot out;
    for (int64_t i = 0; i < n; ++i) {
        const double p = double(w[size_t(i)]) * x[i / 32].q[i % 32] * x[i / 32].d;
        out.dot += p, out.magnitude += std::abs(p);
    }
    return out;
}

}  // namespace

TEST_CASE("quant: a tile of rows against a chunk's columns equals one dot per pair", "[cpu]") {
    // dot_rows_q16_cols (the prefill tile kernel; 4 rows x 32 columns per pass on AVX-512 VNNI, 16 on AVX2; columns
    // in groups of 16 padded with zeros, Q4's offset per block): 1..9 rows cover full passes and short ones; 1..9, 16,
    // 17, 31, 32, 33 and 47 columns cover the column-kernel fallback (under 4), one and two groups, and padded ones.
    // 2,112 values (66 blocks) x up to 81 columns cover the AVX2 kernel's runs of 32 blocks and blocks of 64 columns,
    // each with a short last one.
    for (const int64_t n : {int64_t(256), int64_t(2112)})
        for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
            const uint64_t row_bytes = mk::row_bytes(dtype, n);
            std::vector<uint8_t> rows(row_bytes * 9);
            std::vector<std::vector<float>> weights(9, std::vector<float>(size_t(n)));  // as decoded
            for (uint32_t r = 0; r < 9; ++r) {
                const std::vector<float> w = random_values(size_t(n), -1.0f, 1.0f, 200 + r);
                mk::quantize_row(dtype, w.data(), rows.data() + r * row_bytes, n);
                mk::dequantize_row(dtype, rows.data() + r * row_bytes, weights[r].data(), n);
            }
            const uint32_t max_cols = n == 256 ? 47 : 81;
            std::vector<mk::BlockQ16> xq(size_t(n / 32 * max_cols));
            for (uint32_t c = 0; c < max_cols; ++c) {
                const std::vector<float> x = random_values(size_t(n), -2.0f, 2.0f, 300 + c);
                mk::quantize_activations_q16(x.data(), n, xq.data() + c * (n / 32));
            }
            const std::vector<uint32_t> widths = n == 256 ? std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 31, 32, 33, 47}
                                                          : std::vector<uint32_t>{4, 17, 64, 70, 81};
            for (uint32_t n_rows = 1; n_rows <= 9; ++n_rows)
                for (uint32_t n_cols : widths) {
                    mk::Q16Columns cols;
                    cols.split(xq.data(), n, n_cols);
                    std::vector<float> out(size_t(n_rows) * n_cols + 1, -7.0f);
                    mk::dot_rows_q16_cols(dtype, rows.data(), n_rows, row_bytes, cols, out.data());
                    for (uint32_t r = 0; r < n_rows; ++r)
                        for (uint32_t c = 0; c < n_cols; ++c) {
                            INFO(mk::dtype_name(dtype) << " " << n << " values, " << n_rows << " x " << n_cols << ", row "
                                                       << r << " column " << c);
                            // Both kernels against the float64 dot of the decoded values, within fp32 rounding of
                            // the products' magnitudes (Q4's offsets cancel: a few 1e-8 of it seen, 1e-6 allowed).
                            const QuantDot ref = quant_dot(weights[r], xq.data() + c * (n / 32), n);
                            const float one =
                                mk::dot_row_q16(dtype, rows.data() + r * row_bytes, xq.data() + c * (n / 32), n);
                            CHECK(std::abs(out[r * n_cols + c] - ref.dot) <= 1e-6 * ref.magnitude + 1e-6);
                            CHECK(std::abs(one - ref.dot) <= 1e-6 * ref.magnitude + 1e-6);
                            // The 256-value cases also within 1e-5 relative of the single-token kernel (at 2,112
                            // values Q4_0's cancelling offsets leave 1.2e-5 on a -0.0313 dot: 5 cases).
                            if (n == 256) CHECK(out[r * n_cols + c] == Approx(one).epsilon(1e-5).margin(1e-5));
                        }
                    CHECK(out.back() == -7.0f);  // nothing past the tile's outputs
                }
        }
}

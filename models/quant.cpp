// Block formats: traits, f16/bf16 conversions, the 32-value legacy blocks (Q8_0, Q4_0, Q4_1) and the
// scalar row functions for every format (dot_row's reference kernels; quant_dispatch.cpp picks SIMD
// ones where the CPU has them). The K-quant blocks live in quant_k.cpp. Portable scalar code.
#include "models/quant.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "models/error.hpp"
#include "models/quant_formats.hpp"
#include "models/quant_kernels.hpp"

namespace mk {

namespace {

constexpr DTypeTraits kF32{"F32", 1, 4}, kF16{"F16", 1, 2}, kBF16{"BF16", 1, 2};
constexpr DTypeTraits kQ8_0{"Q8_0", 32, 34}, kQ4_0{"Q4_0", 32, 18}, kQ4_1{"Q4_1", 32, 20};
constexpr DTypeTraits kQ4_K{"Q4_K", 256, 144}, kQ6_K{"Q6_K", 256, 210};

const DTypeTraits* find_traits(uint32_t id) {
    switch (DType(id)) {
        case DType::F32: return &kF32;
        case DType::F16: return &kF16;
        case DType::BF16: return &kBF16;
        case DType::Q8_0: return &kQ8_0;
        case DType::Q4_0: return &kQ4_0;
        case DType::Q4_1: return &kQ4_1;
        case DType::Q4_K: return &kQ4_K;
        case DType::Q6_K: return &kQ6_K;
    }
    return nullptr;
}

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

// Rounds m >> shift to nearest, ties to even.
uint32_t shift_round_even(uint32_t m, int shift) {
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

}  // namespace

const DTypeTraits& dtype_traits(DType dtype) {
    const DTypeTraits* t = find_traits(uint32_t(dtype));
    if (!t) fail("unsupported tensor type {}", uint32_t(dtype));
    return *t;
}

bool is_supported_dtype(uint32_t ggml_type_id) { return find_traits(ggml_type_id) != nullptr; }

std::string_view dtype_name(DType dtype) { return dtype_traits(dtype).name; }

size_t row_bytes(DType dtype, int64_t n) {
    const DTypeTraits& t = dtype_traits(dtype);
    if (n < 0 || n % t.block_values != 0)
        fail("a {} row of {} values is not a whole number of {}-value blocks", t.name, n, t.block_values);
    return size_t(n / t.block_values) * size_t(t.block_bytes);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
        float v = std::ldexp(float(mant), -24);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf, or nan keeping its payload
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f), abs = x & 0x7fffffffu;
    auto sign = uint16_t((x >> 16) & 0x8000);
    if (abs > 0x7f800000u) return sign | 0x7e00 | uint16_t((abs >> 13) & 0x3ff);  // quiet nan
    if (abs >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds past 65504: inf
    if (abs <= 0x33000000u) return sign;           // <= 2^-25 rounds (ties to even) to zero
    uint32_t exp = abs >> 23, mant = (abs & 0x7fffff) | 0x800000;
    if (abs < 0x38800000u)  // below 2^-14: a subnormal half, mant * 2^(exp - 126) rounded
        return sign | uint16_t(shift_round_even(mant, int(126 - exp)));
    // Normal: rebias, then round the 13 dropped bits; a carry rolls into the exponent correctly.
    uint32_t h = ((exp - 112) << 10) | ((abs >> 13) & 0x3ff);
    uint32_t rem = abs & 0x1fff;
    h += (rem > 0x1000 || (rem == 0x1000 && (h & 1)));
    return sign | uint16_t(h);
}

float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

namespace quant {

void Q8_0::dequantize(const uint8_t* block, float* out) {
    float d = load_f16(block);
    for (int i = 0; i < 32; ++i) out[i] = float(int8_t(block[2 + i])) * d;
}

void Q8_0::quantize(const float* in, uint8_t* block) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(in[i]));
    store_f16(block, amax / 127);
    float d = load_f16(block);  // quantize against the stored (rounded) scale
    for (int i = 0; i < 32; ++i) {
        float q = d == 0 ? 0 : std::clamp(std::nearbyint(in[i] / d), -127.0f, 127.0f);
        block[2 + i] = uint8_t(int8_t(q));
    }
}

void Q4_0::dequantize(const uint8_t* block, float* out) {
    float d = load_f16(block);
    const uint8_t* qs = block + 2;
    for (int j = 0; j < 16; ++j) {
        out[j] = float((qs[j] & 0xf) - 8) * d;
        out[j + 16] = float((qs[j] >> 4) - 8) * d;
    }
}

void Q4_0::quantize(const float* in, uint8_t* block) {
    // The value of largest magnitude maps to level -8 (value 0), using the wider side of [-8, 7].
    float max = 0;
    for (int i = 0; i < 32; ++i)
        if (std::fabs(in[i]) > std::fabs(max)) max = in[i];
    store_f16(block, max / -8);
    float d = load_f16(block);
    auto level = [&](float x) { return d == 0 ? 8 : int(std::clamp(std::nearbyint(x / d) + 8, 0.0f, 15.0f)); };
    for (int j = 0; j < 16; ++j) block[2 + j] = uint8_t(level(in[j]) | (level(in[j + 16]) << 4));
}

void Q4_1::dequantize(const uint8_t* block, float* out) {
    float d = load_f16(block), m = load_f16(block + 2);
    const uint8_t* qs = block + 4;
    for (int j = 0; j < 16; ++j) {
        out[j] = float(qs[j] & 0xf) * d + m;
        out[j + 16] = float(qs[j] >> 4) * d + m;
    }
}

void Q4_1::quantize(const float* in, uint8_t* block) {
    float lo = in[0], hi = in[0];
    for (int i = 1; i < 32; ++i) lo = std::min(lo, in[i]), hi = std::max(hi, in[i]);
    store_f16(block, (hi - lo) / 15);
    store_f16(block + 2, lo);
    float d = load_f16(block), m = load_f16(block + 2);
    auto level = [&](float x) { return d == 0 ? 0 : int(std::clamp(std::nearbyint((x - m) / d), 0.0f, 15.0f)); };
    for (int j = 0; j < 16; ++j) block[4 + j] = uint8_t(level(in[j]) | (level(in[j + 16]) << 4));
}

}  // namespace quant

namespace {

// Plain float formats: one value per "block".
struct PlainF32 {
    static float load(const uint8_t* p, int64_t i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    static void store(uint8_t* p, int64_t i, float f) { std::memcpy(p + 4 * i, &f, 4); }
};
struct PlainF16 {
    static float load(const uint8_t* p, int64_t i) { return quant::load_f16(p + 2 * i); }
    static void store(uint8_t* p, int64_t i, float f) { quant::store_f16(p + 2 * i, f); }
};
struct PlainBF16 {
    static float load(const uint8_t* p, int64_t i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        return bf16_to_f32(b);
    }
    static void store(uint8_t* p, int64_t i, float f) {
        uint16_t b = f32_to_bf16(f);
        std::memcpy(p + 2 * i, &b, 2);
    }
};

// Sums run in float within a 32-value chunk (or a block) and in double across them, which keeps
// long rows within ~1e-6 relative of a float64 reference.
template <typename P>
float dot_plain(const uint8_t* row, const float* x, int64_t n) {
    double total = 0;
    for (int64_t i0 = 0; i0 < n; i0 += 32) {
        float sum = 0;
        for (int64_t i = i0; i < std::min(n, i0 + 32); ++i) sum += P::load(row, i) * x[i];
        total += sum;
    }
    return float(total);
}

template <typename B>
float dot_blocks(const uint8_t* row, const float* x, int64_t n) {
    float values[B::kValues];  // one dequantized block
    double total = 0;
    for (int64_t b = 0; b < n / B::kValues; ++b) {
        B::dequantize(row + b * B::kBytes, values);
        const float* xb = x + b * B::kValues;
        float sum = 0;
        for (int i = 0; i < B::kValues; ++i) sum += values[i] * xb[i];
        total += sum;
    }
    return float(total);
}

template <typename B>
void dequantize_blocks(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / B::kValues; ++b) B::dequantize(src + b * B::kBytes, dst + b * B::kValues);
}

template <typename B>
void quantize_blocks(const float* src, uint8_t* dst, int64_t n) {
    for (int64_t b = 0; b < n / B::kValues; ++b) B::quantize(src + b * B::kValues, dst + b * B::kBytes);
}

// Calls f.template operator()<Format, is_plain>() for dtype after checking n fits its blocks.
template <typename F>
decltype(auto) dispatch(DType dtype, int64_t n, F&& f) {
    row_bytes(dtype, n);  // throws on an unsupported type or a partial block
    switch (dtype) {
        case DType::F32: return f.template operator()<PlainF32, true>();
        case DType::F16: return f.template operator()<PlainF16, true>();
        case DType::BF16: return f.template operator()<PlainBF16, true>();
        case DType::Q8_0: return f.template operator()<quant::Q8_0, false>();
        case DType::Q4_0: return f.template operator()<quant::Q4_0, false>();
        case DType::Q4_1: return f.template operator()<quant::Q4_1, false>();
        case DType::Q4_K: return f.template operator()<quant::Q4_K, false>();
        case DType::Q6_K: return f.template operator()<quant::Q6_K, false>();
    }
    fail("unsupported tensor type {}", uint32_t(dtype));
}

}  // namespace

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
    auto bytes = static_cast<const uint8_t*>(src);
    dispatch(dtype, n, [&]<typename B, bool kPlain>() {
        if constexpr (kPlain) {
            for (int64_t i = 0; i < n; ++i) dst[i] = B::load(bytes, i);
        } else {
            dequantize_blocks<B>(bytes, dst, n);
        }
    });
}

// The scalar exact dots: dot_row's fallback and the reference the SIMD kernels are tested against.
void quant::add_scalar_dots(quant::CpuKernels& k) {
    using quant::slot;
    k.dot[slot(DType::F32)] = dot_plain<PlainF32>;
    k.dot[slot(DType::F16)] = dot_plain<PlainF16>;
    k.dot[slot(DType::BF16)] = dot_plain<PlainBF16>;
    k.dot[slot(DType::Q8_0)] = dot_blocks<quant::Q8_0>;
    k.dot[slot(DType::Q4_0)] = dot_blocks<quant::Q4_0>;
    k.dot[slot(DType::Q4_1)] = dot_blocks<quant::Q4_1>;
    k.dot[slot(DType::Q4_K)] = dot_blocks<quant::Q4_K>;
    k.dot[slot(DType::Q6_K)] = dot_blocks<quant::Q6_K>;
}

void quantize_row(DType dtype, const float* src, void* dst, int64_t n) {
    auto bytes = static_cast<uint8_t*>(dst);
    dispatch(dtype, n, [&]<typename B, bool kPlain>() {
        if constexpr (kPlain) {
            for (int64_t i = 0; i < n; ++i) B::store(bytes, i, src[i]);
        } else {
            quantize_blocks<B>(src, bytes, n);
        }
    });
}

}  // namespace mk

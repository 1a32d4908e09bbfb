// Internal to quant*.cpp: one struct per GGML block format with its exact byte layout, each able to
// dequantize and quantize a single block. quant.cpp builds the row functions from these.
#pragma once
#include <cstdint>
#include <cstring>

namespace mk {

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

namespace quant {

// Blocks sit at arbitrary byte offsets (34-byte Q8_0 blocks), so halves are read with memcpy.
inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}
inline void store_f16(uint8_t* p, float f) {
    uint16_t h = f32_to_f16(f);
    std::memcpy(p, &h, 2);
}

// Q8_0: f16 d, 32 x int8 q; value = q * d.
struct Q8_0 {
    static constexpr int kValues = 32, kBytes = 34;
    static void dequantize(const uint8_t* block, float* out);
    static void quantize(const float* in, uint8_t* block);
};

// Q4_0: f16 d, 16 bytes; byte j holds value j (low nibble) and value j + 16 (high); value = (q - 8) * d.
struct Q4_0 {
    static constexpr int kValues = 32, kBytes = 18;
    static void dequantize(const uint8_t* block, float* out);
    static void quantize(const float* in, uint8_t* block);
};

// Q4_1: f16 d, f16 m, then nibbles laid out as in Q4_0; value = q * d + m.
struct Q4_1 {
    static constexpr int kValues = 32, kBytes = 20;
    static void dequantize(const uint8_t* block, float* out);
    static void quantize(const float* in, uint8_t* block);
};

// Q4_K: f16 d, f16 dmin, 12 bytes of eight packed 6-bit (scale, min) pairs, 128 bytes of nibbles.
// Sub-block j (32 values) has value = d * scale_j * q - dmin * min_j.
struct Q4_K {
    static constexpr int kValues = 256, kBytes = 144;
    static void dequantize(const uint8_t* block, float* out);
    static void quantize(const float* in, uint8_t* block);
};

// Q4_K's sub-block j (0..7) scale and min, each 6 bits packed in the 12 bytes `s` after d and dmin:
// bytes 0-3 hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3; bytes 8-11 hold the low 4 bits
// of scale j+4 (low nibble) and min j+4 (high nibble), whose top 2 bits sit in bits 6-7 of bytes j
// and j+4.
struct ScaleMin {
    int scale, min;
};
inline ScaleMin unpack_scale_min(const uint8_t* s, int j) {
    if (j < 4) return {s[j] & 63, s[j + 4] & 63};
    return {(s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}
// All eight at once, byte j of `scales` / `mins` for sub-block j, with 32-bit integer ops (4 bytes
// in parallel) and no stores: the SIMD kernels load them straight into vectors.
inline void unpack_scale_mins(const uint8_t* s, uint64_t& scales, uint64_t& mins) {
    uint32_t a, b, c;  // bytes 0-3, 4-7, 8-11
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + 4, 4);
    std::memcpy(&c, s + 8, 4);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    scales = uint64_t(a & low6) | uint64_t((c & low4) | (((a >> 6) & low2) << 4)) << 32;
    mins = uint64_t(b & low6) | uint64_t(((c >> 4) & low4) | (((b >> 6) & low2) << 4)) << 32;
}

// Q6_K: 128 bytes low nibbles (ql), 64 bytes high 2-bit pairs (qh), 16 int8 scales, f16 d.
// Value i = d * scales[i / 16] * (q6 - 32).
struct Q6_K {
    static constexpr int kValues = 256, kBytes = 210;
    static void dequantize(const uint8_t* block, float* out);
    static void quantize(const float* in, uint8_t* block);
};

}  // namespace quant
}  // namespace mk

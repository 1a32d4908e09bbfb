// The 256-value K-quant super-blocks, Q4_K and Q6_K, in GGML's byte layout. The quantizers are plain
// round-to-nearest with scales rounded up, so no value is clipped; they do not search for better scales.
#include <algorithm>
#include <cmath>

#include "models/quant_formats.hpp"

namespace mk::quant {

namespace {

// The inverse of unpack_scale_min (quant_formats.hpp).
void pack_scale_mins(const int* scale, const int* min, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t(scale[j] | ((scale[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t(min[j] | ((min[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((scale[j + 4] & 0xf) | ((min[j + 4] & 0xf) << 4));
    }
}

// The smallest integer k in [0, k_max] with k * unit >= x (unit 0 gives 0).
int ceil_multiple(float x, float unit, int k_max) {
    if (unit <= 0) return 0;
    return int(std::clamp(std::ceil(x / unit), 0.0f, float(k_max)));
}

}  // namespace

void Q4_K::dequantize(const uint8_t* block, float* out) {
    float d = load_f16(block), dmin = load_f16(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* qs = block + 16;
    // Each 32 bytes of nibbles carry two sub-blocks: low nibbles the first, high nibbles the second.
    for (int j = 0; j < 8; ++j) {
        ScaleMin sm = unpack_scale_min(scales, j);
        float scale = d * float(sm.scale), offset = dmin * float(sm.min);
        const uint8_t* q = qs + 32 * (j / 2);
        int shift = 4 * (j % 2);
        for (int l = 0; l < 32; ++l) out[32 * j + l] = scale * float((q[l] >> shift) & 0xf) - offset;
    }
}

void Q4_K::quantize(const float* in, uint8_t* block) {
    // Sub-block j covers [-min_j, -min_j + 15 * step_j]; min_j >= 0 because the format subtracts it.
    float step[8], low[8], max_step = 0, max_low = 0;
    for (int j = 0; j < 8; ++j) {
        const float* x = in + 32 * j;
        float lo = 0, hi = x[0];
        for (int l = 0; l < 32; ++l) lo = std::min(lo, x[l]), hi = std::max(hi, x[l]);
        step[j] = (hi - lo) / 15;
        low[j] = -lo;
        max_step = std::max(max_step, step[j]);
        max_low = std::max(max_low, low[j]);
    }
    store_f16(block, max_step / 63);
    store_f16(block + 2, max_low / 63);
    float d = load_f16(block), dmin = load_f16(block + 2);
    int scale[8], min[8];
    for (int j = 0; j < 8; ++j) {
        scale[j] = ceil_multiple(step[j], d, 63);
        min[j] = dmin > 0 ? int(std::clamp(std::nearbyint(low[j] / dmin), 0.0f, 63.0f)) : 0;
    }
    pack_scale_mins(scale, min, block + 4);
    uint8_t* qs = block + 16;
    std::fill(qs, qs + 128, uint8_t(0));
    for (int j = 0; j < 8; ++j) {
        float s = d * float(scale[j]), offset = dmin * float(min[j]);
        for (int l = 0; l < 32; ++l) {
            int q = s > 0 ? int(std::clamp(std::nearbyint((in[32 * j + l] + offset) / s), 0.0f, 15.0f)) : 0;
            qs[32 * (j / 2) + l] |= uint8_t(q << (4 * (j % 2)));
        }
    }
}

// Q6_K value v (0..255): half n = v / 128, group g = (v % 128) / 32, lane l = v % 32. Its low 4 bits are
// the low (g < 2) or high (g >= 2) nibble of ql[64n + 32(g % 2) + l]; its top 2 bits are bits 2g..2g+1
// of qh[32n + l].
void Q6_K::dequantize(const uint8_t* block, float* out) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
    float d = load_f16(block + 208);
    for (int v = 0; v < 256; ++v) {
        int n = v / 128, g = (v % 128) / 32, l = v % 32;
        int low = (ql[64 * n + 32 * (g % 2) + l] >> (g < 2 ? 0 : 4)) & 0xf;
        int high = (qh[32 * n + l] >> (2 * g)) & 3;
        out[v] = d * float(scales[v / 16]) * float((low | (high << 4)) - 32);
    }
}

void Q6_K::quantize(const float* in, uint8_t* block) {
    // Sub-block i (16 values) uses levels [-31, 31] of its scale, leaving -32 unused so it is symmetric.
    float step[16], max_step = 0;
    for (int i = 0; i < 16; ++i) {
        float amax = 0;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(in[16 * i + l]));
        step[i] = amax / 31;
        max_step = std::max(max_step, step[i]);
    }
    store_f16(block + 208, max_step / 127);
    float d = load_f16(block + 208);
    uint8_t* ql = block;
    uint8_t* qh = block + 128;
    std::fill(block, block + 192, uint8_t(0));
    for (int i = 0; i < 16; ++i) block[192 + i] = uint8_t(int8_t(ceil_multiple(step[i], d, 127)));
    for (int v = 0; v < 256; ++v) {
        float s = d * float(int8_t(block[192 + v / 16]));
        int q = s > 0 ? int(std::clamp(std::nearbyint(in[v] / s), -32.0f, 31.0f)) + 32 : 32;
        int n = v / 128, g = (v % 128) / 32, l = v % 32;
        ql[64 * n + 32 * (g % 2) + l] |= uint8_t((q & 0xf) << (g < 2 ? 0 : 4));
        qh[32 * n + l] |= uint8_t((q >> 4) << (2 * g));
    }
}

}  // namespace mk::quant

// Device helpers the ops' CUDA implementations share: warp and team sums, one-warp row dots
// over the weight formats (F32, F16, BF16, Q8_0, Q4_0, Q4_1), dequantization, RMSNorm, SiLU, RoPE.
// Same math as cpu_math.hpp and models/quant.cpp, with fp32 accumulation in a fixed order.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "instructions/device.cuh"
#include "models/tensor.hpp"

namespace mk::dev {

// Scratch layout every op follows: kReduceFloats floats for cross-warp reductions (two per warp:
// a value and, for argmax, an index), then the op's vectors (16-byte aligned).
inline constexpr uint32_t kReduceFloats = 64;
__device__ inline float* reduce_scratch(const DeviceOpContext& ctx) { return ctx.scratch; }
__device__ inline float* vector_scratch(const DeviceOpContext& ctx) { return ctx.scratch + kReduceFloats; }

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the team, the same value in every thread: warps reduce, then every thread adds the warp
// sums in warp order (deterministic). Ends with a sync so `red` can be reused at once.
__device__ inline float team_sum(float v, const Team& team, float* red) {
    v = warp_sum(v);
    if (team.lane() == 0) red[team.warp()] = v;
    team.sync();
    float total = 0.0f;
    for (uint32_t w = 0; w < team.n_warps(); ++w) total += red[w];
    team.sync();
    return total;
}

__device__ inline float f16_to_f32(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ inline float bf16_to_f32(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }
__device__ inline uint16_t load_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ inline uint32_t load_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
// Four bytes at an address that is only 2-byte aligned (Q8_0 and Q4_0 blocks inside a row).
__device__ inline uint32_t load_u32_align2(const uint8_t* p) { return load_u16(p) | uint32_t(load_u16(p + 2)) << 16; }
__device__ inline float4 load_f4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ inline float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ inline float4 bytes_to_f4(uint32_t q) {  // four signed bytes
    return {float(int8_t(q)), float(int8_t(q >> 8)), float(int8_t(q >> 16)), float(int8_t(q >> 24))};
}
__device__ inline float4 nibbles_to_f4(uint32_t q, int shift, float bias) {  // nibble `shift` of each byte
    return {float((q >> shift) & 15u) + bias, float((q >> (shift + 8)) & 15u) + bias,
            float((q >> (shift + 16)) & 15u) + bias, float((q >> (shift + 24)) & 15u) + bias};
}
// Two halves' bits, low one first; built from the bits, not by punning the word (g++ builds this for the emulator).
__device__ inline float2 half2_bits_to_f2(uint32_t w) { return {f16_to_f32(uint16_t(w)), f16_to_f32(uint16_t(w >> 16))}; }
__device__ inline float2 bf162_bits_to_f2(uint32_t w) {
    return {__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)};
}

// KV-cache elements (ModelDims::kv_type): fp32, or bf16 widened on load and rounded to nearest even on store
// (models/quant.cpp's f32_to_bf16 bit for bit, so the CPU and the device store the same bits).
__device__ inline float kv_load(const float* row, uint32_t i) { return row[i]; }
__device__ inline float kv_load(const uint16_t* row, uint32_t i) { return bf16_to_f32(row[i]); }
__device__ inline float4 kv_load4(const float* p) { return load_f4(p); }
__device__ inline float4 kv_load4(const uint16_t* p) {  // 8-byte aligned: 4 bf16
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    const float2 lo = bf162_bits_to_f2(w.x), hi = bf162_bits_to_f2(w.y);
    return {lo.x, lo.y, hi.x, hi.y};
}
__device__ inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
__device__ inline void kv_store(float* p, float v) { *p = v; }
__device__ inline void kv_store(uint16_t* p, float v) { *p = f32_to_bf16(v); }

// Element i of a row, any supported format; NaN for a format the device does not decode (the host
// rejects those before upload).
__device__ inline float dequantize_element(uint32_t dtype, const uint8_t* row, uint32_t i) {
    const uint32_t b = i / 32, j = i % 32;
    switch (DType(dtype)) {
        case DType::F32: return reinterpret_cast<const float*>(row)[i];
        case DType::F16: return f16_to_f32(load_u16(row + 2 * i));
        case DType::BF16: return bf16_to_f32(load_u16(row + 2 * i));
        case DType::Q8_0: return float(int8_t(row[34 * b + 2 + j])) * f16_to_f32(load_u16(row + 34 * b));
        case DType::Q4_0: {
            const uint8_t q = row[18 * b + 2 + j % 16];
            return float(int((j < 16 ? q : q >> 4) & 15) - 8) * f16_to_f32(load_u16(row + 18 * b));
        }
        case DType::Q4_1: {
            const uint8_t* block = row + 20 * b;
            const uint8_t q = block[4 + j % 16];
            return float((j < 16 ? q : q >> 4) & 15) * f16_to_f32(load_u16(block)) + f16_to_f32(load_u16(block + 2));
        }
        default: return __uint_as_float(0x7fc00000u);
    }
}

// out[0, n) = the row dequantized, threads of the team striding over elements.
__device__ inline void dequantize_row(uint32_t dtype, const uint8_t* row, float* out, uint32_t n, const Team& team) {
    for (uint32_t i = team.rank; i < n; i += team.size) out[i] = dequantize_element(dtype, row, i);
}

// A vector as row_dot reads it: load4(i) gives values i..i+3 (i a multiple of 4), at(i) value i. PlainVector is
// fp32 in memory, 16-byte aligned; the prefill ops read other views (instructions/common/rows_math.cuh).
struct PlainVector {
    const float* x;
    __device__ float4 load4(uint32_t i) const { return load_f4(x + i); }
    __device__ float at(uint32_t i) const { return x[i]; }
};

// row . x over `cols` values, computed by one warp and valid in every lane. The row starts 16-byte
// aligned; x is a vector view as above. Plain formats: each lane takes 16-byte chunks (lane, lane + 32,
// ...); block formats: a few lanes share a block, each reading 4 quant bytes with loads as wide as
// the block's alignment allows, so consecutive lanes read consecutive x values (no bank conflicts
// on a shared-memory x). Partial sums are scaled per 4 (or 8) values, summed in a fixed order.
template <class Vector>
__device__ inline float row_dot(uint32_t dtype, const uint8_t* row, const Vector& x, uint32_t cols, uint32_t lane) {
    float acc = 0.0f;
    uint32_t done = cols;  // values covered by the vector loop; a plain format's tail is done per value
    switch (DType(dtype)) {
        case DType::F32: {
            done = cols / 4 * 4;
            for (uint32_t c = lane; c < cols / 4; c += 32)
                acc += dot4(load_f4(reinterpret_cast<const float*>(row) + 4 * c), x.load4(4 * c));
            break;
        }
        case DType::F16:
        case DType::BF16: {
            const bool f16 = DType(dtype) == DType::F16;
            done = cols / 8 * 8;
            for (uint32_t c = lane; c < cols / 8; c += 32) {
                const uint4 w = *reinterpret_cast<const uint4*>(row + 16 * c);
                const float2 w0 = f16 ? half2_bits_to_f2(w.x) : bf162_bits_to_f2(w.x);
                const float2 w1 = f16 ? half2_bits_to_f2(w.y) : bf162_bits_to_f2(w.y);
                const float2 w2 = f16 ? half2_bits_to_f2(w.z) : bf162_bits_to_f2(w.z);
                const float2 w3 = f16 ? half2_bits_to_f2(w.w) : bf162_bits_to_f2(w.w);
                acc += dot4({w0.x, w0.y, w1.x, w1.y}, x.load4(8 * c)) +
                       dot4({w2.x, w2.y, w3.x, w3.y}, x.load4(8 * c + 4));
            }
            break;
        }
        case DType::Q8_0: {  // 8 lanes per 34-byte block, lane k: values 4k..4k+3
            for (uint32_t u = lane; u < cols / 32 * 8; u += 32) {
                const uint32_t b = u / 8, k = u % 8;
                const uint8_t* block = row + 34 * b;
                const float s = dot4(bytes_to_f4(load_u32_align2(block + 2 + 4 * k)), x.load4(32 * b + 4 * k));
                acc += s * f16_to_f32(load_u16(block));
            }
            break;
        }
        case DType::Q4_0:
        case DType::Q4_1: {  // 4 lanes per block, lane k: quant bytes 4k..4k+3 = values 4k.. (low), 16+4k.. (high)
            const bool q4_1 = DType(dtype) == DType::Q4_1;
            const uint32_t block_bytes = q4_1 ? 20 : 18;
            const float bias = q4_1 ? 0.0f : -8.0f;
            for (uint32_t u = lane; u < cols / 32 * 4; u += 32) {
                const uint32_t b = u / 4, k = u % 4;
                const uint8_t* block = row + block_bytes * b;
                const uint32_t q = q4_1 ? load_u32(block + 4 + 4 * k) : load_u32_align2(block + 2 + 4 * k);
                const float4 lo = x.load4(32 * b + 4 * k), hi = x.load4(32 * b + 16 + 4 * k);
                const float s = dot4(nibbles_to_f4(q, 0, bias), lo) + dot4(nibbles_to_f4(q, 4, bias), hi);
                acc += s * f16_to_f32(load_u16(block));
                if (q4_1)  // + m * (sum of the block's x)
                    acc += f16_to_f32(load_u16(block + 2)) * (lo.x + lo.y + lo.z + lo.w + hi.x + hi.y + hi.z + hi.w);
            }
            break;
        }
        default: return __uint_as_float(0x7fc00000u);
    }
    for (uint32_t i = done + lane; i < cols; i += 32) acc += dequantize_element(dtype, row, i) * x.at(i);
    return warp_sum(acc);
}

// Calls visit(tile, row, bytes, weight) for every weight row of every tile, bytes its row in the tile, in the
// warp it is dealt to. Rows are dealt to warps across tiles: the instruction's row r (counted from its first
// tile's first row) goes to warp r % n_warps, so every warp works whatever a tile holds (BF16 rows of 2048 columns
// fill a 16 KiB page with 4, of 8192 columns with 1), a warp sees its rows in increasing order, and paired
// tiles of the same rows (gate/up) give a row to the same warp. Every warp acquires and releases every tile
// in order, releasing it once its own rows in it are done: no team barrier per tile.
template <class Tiles, class Visit>
__device__ inline void for_each_warp_row(const DeviceOpContext& ctx, const Team& team, Tiles& tiles, Visit&& visit) {
    const uint32_t n_warps = team.n_warps(), warp = team.warp();
    const uint32_t base = tiles.count() ? tiles.info(0).row_begin : 0;
    for (uint32_t t = 0; t < tiles.count(); ++t) {
        const uint8_t* bytes = tiles.acquire(t);
        const DeviceTile& tile = tiles.info(t);
        const DeviceWeight& w = ctx.weights[tile.weight];
        const uint32_t first = (warp + n_warps - (tile.row_begin - base) % n_warps) % n_warps;  // this warp's first
        for (uint32_t r = first; r < tile.n_rows; r += n_warps)
            visit(tile, tile.row_begin + r, bytes + uint64_t(r) * w.row_bytes, w);
        tiles.release(t);
    }
}

// Calls visit(tile, row, dot) for every weight row of every tile, dot = row . x valid in all lanes of the
// visiting warp (rows dealt as for_each_warp_row deals them).
template <class Tiles, class Visit>
__device__ inline void for_each_row_dot(const DeviceOpContext& ctx, const Team& team, Tiles& tiles, const float* x,
                                        uint32_t cols, Visit&& visit) {
    for_each_warp_row(ctx, team, tiles,
                      [&](const DeviceTile& tile, uint32_t row, const uint8_t* bytes, const DeviceWeight& w) {
                          visit(tile, row, row_dot(w.dtype, bytes, PlainVector{x}, cols, team.lane()));
                      });
}

// out = w * x / sqrt(mean(x^2) + eps), w an F32 vector; ends with a sync so every thread sees out.
__device__ inline void rms_norm(const float* x, const float* w, float eps, uint32_t n, float* out, const Team& team,
                                float* red) {
    float sum_sq = 0.0f;
    for (uint32_t i = team.rank; i < n; i += team.size) sum_sq += x[i] * x[i];
    sum_sq = team_sum(sum_sq, team, red);
    const float scale = float(1.0 / sqrt(double(sum_sq) / n + eps));  // as cpu_math.hpp: the root in double
    for (uint32_t i = team.rank; i < n; i += team.size) out[i] = w[i] * (x[i] * scale);
    team.sync();
}

__device__ inline float silu(float v) { return v / (1.0f + expf(-v)); }

// Rotates the adjacent pair (a, b) by pos * inv_freq, the angle's sine and cosine in double as on the
// CPU. sincospi of angle / pi keeps the argument reduction exact (no slow path, no local memory);
// it differs from sincos(angle) by ~1e-16 relative, far below the float rounding that follows.
__device__ inline void rope_pair(float& a, float& b, int32_t pos, float inv_freq) {
    const double angle = double(pos) * inv_freq;
    double s, c;
    sincospi(angle * 0.31830988618379067154, &s, &c);  // 1 / pi
    const float cf = float(c), sf = float(s), x = a, y = b;
    a = x * cf - y * sf;
    b = x * sf + y * cf;
}

}  // namespace mk::dev

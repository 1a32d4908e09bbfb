// Internal to quant*.cpp: the per-ISA tables of row kernels that dot_row, dot_row_q16 and
// quantize_activations_q16 dispatch through (quant_dispatch.cpp), indexed by GGML type id.
#pragma once
#include <cstdint>

#include "models/quant.hpp"

namespace mk::quant {

// Kernels take a validated n (a whole number of blocks, n >= 0); they never throw.
using DotFn = float (*)(const uint8_t* row, const float* x, int64_t n);
using DotQ16Fn = float (*)(const uint8_t* row, const BlockQ16* xq, int64_t n);
using QuantizeQ16Fn = void (*)(const float* x, int64_t n, BlockQ16* out);
// out[j * out_stride] = the dot of row with columns xq + j * x_stride (blocks), j < n_cols.
using DotQ16ColsFn = void (*)(const uint8_t* row, const BlockQ16* xq, int64_t n, int64_t x_stride, uint32_t n_cols,
                              float* out, size_t out_stride);
// out[r * n_cols + c] = the dot of row r (rows + r * row_bytes) with column c of cols (its split q, d, sum), for a
// staged tile's n_rows rows and a chunk's n_cols columns.
using DotQ16TileFn = void (*)(const uint8_t* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols,
                              float* out, const uint8_t* next, uint64_t next_bytes);

constexpr uint32_t kDTypeSlots = 31;  // GGML type ids 0..30; BF16 (30) is the largest mk supports

struct CpuKernels {
    DotFn dot[kDTypeSlots] = {};       // null: a type mk does not support
    DotQ16Fn dot_q16[kDTypeSlots] = {};  // null: no 16-bit activation dot for this type
    QuantizeQ16Fn quantize_q16 = nullptr;
    DotQ16ColsFn dot_q16_cols[kDTypeSlots] = {};  // null: one dot_q16 per column
    DotQ16TileFn dot_q16_tile[kDTypeSlots] = {};  // null: dot_q16_cols per row, 4 columns at a time
};

inline uint32_t slot(DType dtype) { return uint32_t(dtype); }

// Each fills its entries; the AVX2 table starts as a copy of the scalar one and overrides.
void add_scalar_dots(CpuKernels& k);  // quant.cpp
void add_avx2_dots(CpuKernels& k);    // quant_avx2.cpp: F32, F16, BF16, Q8_0, Q4_0, Q4_1
void add_avx2_k_dots(CpuKernels& k);  // quant_avx2_k.cpp: Q4_K, Q6_K
void add_scalar_q16(CpuKernels& k);   // quant_q16.cpp
void add_avx2_q16(CpuKernels& k);     // quant_avx2_q16.cpp
void add_avx2_tile(CpuKernels& k);    // quant_avx2_tile.cpp: the prefill tile kernels without AVX-512
void add_avx512_q16(CpuKernels& k);   // quant_avx512_q16.cpp: the prefill tile kernels

}  // namespace mk::quant

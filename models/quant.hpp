// Block formats as GGML stores them (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): sizes,
// scalar conversions, row dequantization and row dot products against fp32 activations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/tensor.hpp"

namespace mk {

struct DTypeTraits {
    std::string_view name;
    int block_values;  // values per block (1 for plain floats)
    int block_bytes;   // bytes per block
};

// Throws mk::Error for an id mk does not support.
const DTypeTraits& dtype_traits(DType dtype);
bool is_supported_dtype(uint32_t ggml_type_id);
std::string_view dtype_name(DType dtype);
// Bytes of a row of n values; throws if n is not a multiple of the block size.
size_t row_bytes(DType dtype, int64_t n);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);  // round to nearest even

// dst[0..n) = values of one row stored in `dtype`.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);
// sum_i row[i] * x[i] over n values, the row dequantized block by block (no full-row copy).
float dot_row(DType dtype, const void* row, const float* x, int64_t n);
// Quantizes n floats into dtype's blocks (round to nearest); used by writers and tests.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace mk

// Block formats as GGML stores them (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): sizes, scalar
// conversions, row dequantization, and row dots (exact on fp32 activations, or fast on 8-bit ones)
// whose kernels are picked at run time for the CPU (AVX2 or portable scalar).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
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
// Quantizes n floats into dtype's blocks (round to nearest); used by writers and tests.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n);

// ---- CPU dot kernels (quant_dispatch.cpp). The instruction set is chosen once, on first use: AVX-512 (AVX2's
// kernels plus AVX-512 VNNI prefill tile kernels) or AVX2 (with FMA and F16C) where the CPU has it, else portable
// scalar. MK_CPU_ISA=scalar forces scalar, MK_CPU_ISA=avx2 or avx512 insists on that set (throws without it); unset
// or "auto" picks the best.
enum class CpuIsa : uint8_t { Scalar, Avx2, Avx512 };
CpuIsa cpu_isa();
const char* cpu_isa_name();  // of the active ISA: "scalar", "avx2" or "avx512"
const char* cpu_isa_name(CpuIsa isa);
bool cpu_has_isa(CpuIsa isa);

// Exact mode: sum_i row[i] * x[i] over n fp32 activations, the row dequantized inside the dot
// (no copy), fp32 accumulation in a fixed order (deterministic); within 1e-5 relative of a float64
// dot of the dequantized row when the products do not cancel. Throws on a partial block.
float dot_row(DType dtype, const void* row, const float* x, int64_t n);
// The same on an explicit ISA (tests, benchmarks); throws if this CPU lacks it.
float dot_row(CpuIsa isa, DType dtype, const void* row, const float* x, int64_t n);

// Values per activation block of the fast mode below (as in Q8_0, Q4_0 and Q4_1 weights).
constexpr int kActivationBlockValues = 32;

// Fast mode: activations quantized once per instruction to 16-bit blocks of 32 (d = max|x| / 32767),
// then pmaddwd (i16 x i16) integer dots against the weights' own integers: ~2e-5 of the dots' rms on
// Gaussian data; SmolLM2's logits within 7e-4 relative L2 of the oracle. (An 8-bit variant, as llama.cpp's
// q8 dots, was ~1.1x faster but moved SmolLM2's logits by 0.7-13%; it was removed, its figures are in
// bench/RESULTS.md.)
struct BlockQ16 {
    float d;        // x[i] ~= q[i] * d
    float sum;      // d * sum(q)
    int16_t q[32];
};
static_assert(sizeof(BlockQ16) == 72);
// True for Q8_0, Q4_0 and Q4_1 (the formats of the default models); others use dot_row.
bool has_q16_dot(DType dtype);
// out[0, n / 32) = x quantized: q = round-to-nearest-even(x * 32767 / max|x|); n a multiple of 32.
void quantize_activations_q16(const float* x, int64_t n, BlockQ16* out);
// sum_i row[i] * x[i] on quantize_activations_q16's blocks; error at most sum_b d_b / 2 *
// sum_{i in b} |row[i]|. Throws where !has_q16_dot(dtype) or on a partial block.
float dot_row_q16(DType dtype, const void* row, const BlockQ16* xq, int64_t n);
float dot_row_q16(CpuIsa isa, DType dtype, const void* row, const BlockQ16* xq, int64_t n);
void quantize_activations_q16(CpuIsa isa, const float* x, int64_t n, BlockQ16* out);
// A row against several columns of blocks (a prefill chunk's tokens): out[j * out_stride] = dot_row_q16(dtype, row,
// xq + j * x_stride, n) for j < n_cols, up to float rounding; each weight block is decoded once for 4 columns.
void dot_row_q16_cols(DType dtype, const void* row, const BlockQ16* xq, int64_t n, int64_t x_stride, uint32_t n_cols,
                      float* out, size_t out_stride);

// A chunk's q16 columns (quantize_activations_q16's blocks, column c at xq + c * n / 32) for the prefill tile
// kernels, made once per instruction: the blocks, and where the CPU has AVX-512 VNNI the same values interleaved
// by token: for each group of 16 columns (the last padded with zero columns), each block b and each pair k of its
// values, 16 columns x (value 2k, value 2k + 1) in 64 bytes, so one vpdpwssd takes a weight pair (broadcast)
// against 16 tokens and a block's 16 products sum in integers for all 16 tokens at once.
struct Q16Columns {
    const BlockQ16* blocks = nullptr;
    int64_t n = 0;  // values per column
    uint32_t n_cols = 0;
    const int16_t* q = nullptr;  // (n_groups, n / 32, 16 pairs, 16 columns, 2), 64-byte aligned; null where no tile
                                 // kernel reads it
    const float* d = nullptr;    // (n_groups, n / 32, 16 columns): each block's d (0 for a padding column)
    const float* sum = nullptr;  // the same for sum
    uint32_t n_groups = 0;       // groups of 16 columns, even (a last odd group is followed by one of zeros)
    void split(const BlockQ16* xq, int64_t n_values, uint32_t columns);  // keeps the storage below
    std::vector<int16_t> q_storage;
    std::vector<float> d_storage, sum_storage;
};
// A staged tile's rows against a chunk's columns: out[r * n_cols + c] = dot_row_q16(dtype, rows + r * row_bytes,
// column c, n) up to float rounding, for r < n_rows, c < cols.n_cols (AVX-512 VNNI: 4 rows x 32 columns in
// registers, each row pair of values broadcast against 16 columns; AVX2: 4 rows x 16 columns, against 8).
// `next` (next_bytes long, may be null) is the tile that comes after: the AVX-512 kernel prefetches it into L2
// across its passes, so the next tile's decode does not wait on memory.
void dot_rows_q16_cols(DType dtype, const void* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols,
                       float* out, const void* next = nullptr, uint64_t next_bytes = 0);

}  // namespace mk

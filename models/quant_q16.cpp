// Accurate fast mode, portable scalar: activations quantized to 16-bit BlockQ16 and integer dots
// against Q8_0, Q4_0 and Q4_1 weights. The fallback and reference for quant_avx2_q16.cpp.
#include "models/quant_int_scalar.hpp"

namespace mk::quant {

void add_scalar_q16(CpuKernels& k) {
    k.quantize_q16 = int_scalar::quantize<BlockQ16, 32767>;
    k.dot_q16[slot(DType::Q8_0)] = int_scalar::dot_q8_0<BlockQ16>;
    k.dot_q16[slot(DType::Q4_0)] = int_scalar::dot_q4_0<BlockQ16>;
    k.dot_q16[slot(DType::Q4_1)] = int_scalar::dot_q4_1<BlockQ16>;
}

}  // namespace mk::quant

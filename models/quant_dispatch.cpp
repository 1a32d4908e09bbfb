// Run-time ISA dispatch for the CPU row kernels: builds the scalar and AVX2 tables once, picks one
// (MK_CPU_ISA overrides), validates each call's type and length, then calls the kernel.
#include <cstdlib>
#include <string_view>

#include "models/error.hpp"
#include "models/quant_kernels.hpp"

namespace mk {

namespace {

using quant::CpuKernels;

struct Tables {
    CpuKernels scalar, avx2;
    bool has_avx2 = false;
    CpuIsa active = CpuIsa::Scalar;
};

bool cpu_supports_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    // libgcc's checks include the OS saving YMM state (XGETBV), not only the CPUID bits.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

Tables build_tables() {
    Tables t;
    quant::add_scalar_dots(t.scalar);
    quant::add_scalar_q8(t.scalar);
    t.avx2 = t.scalar;
    t.has_avx2 = cpu_supports_avx2();
#if defined(__x86_64__) || defined(__i386__)
    if (t.has_avx2) {
        quant::add_avx2_dots(t.avx2);
        quant::add_avx2_k_dots(t.avx2);
        quant::add_avx2_q8(t.avx2);
    }
#endif
    const char* env = std::getenv("MK_CPU_ISA");
    std::string_view want = env ? env : "auto";
    if (want == "scalar") {
        t.active = CpuIsa::Scalar;
    } else if (want == "avx2") {
        if (!t.has_avx2) fail("MK_CPU_ISA=avx2, but this CPU lacks AVX2, FMA or F16C");
        t.active = CpuIsa::Avx2;
    } else if (want == "auto" || want.empty()) {
        t.active = t.has_avx2 ? CpuIsa::Avx2 : CpuIsa::Scalar;
    } else {
        fail("MK_CPU_ISA={}: expected scalar, avx2 or auto", want);
    }
    return t;
}

// Built on first use (thread-safe); a bad MK_CPU_ISA throws from the first kernel call.
const Tables& tables() {
    static const Tables t = build_tables();
    return t;
}

const CpuKernels& kernels(CpuIsa isa) {
    const Tables& t = tables();
    if (isa == CpuIsa::Scalar) return t.scalar;
    if (!t.has_avx2) fail("CPU kernels: this CPU lacks {}", cpu_isa_name(isa));
    return t.avx2;
}

// Blocks are 1, 32 or 256 values, so a partial block is a mask test, not a division (dot_row is
// called once per weight row, ~10 ns of work for a 576-value Q4_1 row).
constexpr int64_t block_mask(DType dtype) {
    switch (dtype) {
        case DType::F32:
        case DType::F16:
        case DType::BF16: return 0;
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1: return 31;
        case DType::Q4_K:
        case DType::Q6_K: return 255;
    }
    return -1;
}

[[noreturn]] void bad_row(DType dtype, int64_t n, const char* what) {
    row_bytes(dtype, n);  // throws for an unknown type or a partial block
    fail("{}: no kernel for {} rows (check has_q8_dot first)", what, dtype_name(dtype));
}

}  // namespace

CpuIsa cpu_isa() { return tables().active; }

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::Avx2 ? "avx2" : "scalar"; }

const char* cpu_isa_name() { return cpu_isa_name(cpu_isa()); }

bool cpu_has_isa(CpuIsa isa) { return isa == CpuIsa::Scalar || tables().has_avx2; }

float dot_row(CpuIsa isa, DType dtype, const void* row, const float* x, int64_t n) {
    const uint32_t s = quant::slot(dtype);
    quant::DotFn f = s < quant::kDTypeSlots ? kernels(isa).dot[s] : nullptr;
    if (!f || n < 0 || (n & block_mask(dtype))) [[unlikely]]
        bad_row(dtype, n, "dot_row");
    return f(static_cast<const uint8_t*>(row), x, n);
}

float dot_row(DType dtype, const void* row, const float* x, int64_t n) { return dot_row(cpu_isa(), dtype, row, x, n); }

bool has_q8_dot(DType dtype) {
    const uint32_t s = quant::slot(dtype);
    return s < quant::kDTypeSlots && tables().scalar.dot_q8[s] != nullptr;
}

float dot_row_q8(CpuIsa isa, DType dtype, const void* row, const BlockQ8* xq, int64_t n) {
    const uint32_t s = quant::slot(dtype);
    quant::DotQ8Fn f = s < quant::kDTypeSlots ? kernels(isa).dot_q8[s] : nullptr;
    if (!f || n < 0 || (n & block_mask(dtype))) [[unlikely]]
        bad_row(dtype, n, "dot_row_q8");
    return f(static_cast<const uint8_t*>(row), xq, n);
}

float dot_row_q8(DType dtype, const void* row, const BlockQ8* xq, int64_t n) {
    return dot_row_q8(cpu_isa(), dtype, row, xq, n);
}

void quantize_activations_q8(CpuIsa isa, const float* x, int64_t n, BlockQ8* out) {
    if (n < 0 || n % kQ8BlockValues != 0)
        fail("quantize_activations_q8: {} values is not a whole number of {}-value blocks", n, kQ8BlockValues);
    kernels(isa).quantize_q8(x, n, out);
}

void quantize_activations_q8(const float* x, int64_t n, BlockQ8* out) {
    quantize_activations_q8(cpu_isa(), x, n, out);
}

}  // namespace mk

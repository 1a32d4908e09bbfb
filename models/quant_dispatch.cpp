// Run-time ISA dispatch for the CPU row kernels: builds the scalar and AVX2 tables once, picks one
// (MK_CPU_ISA overrides), validates each call's type and length, then calls the kernel.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include "models/error.hpp"
#include "models/quant_kernels.hpp"

namespace mk {

namespace {

using quant::CpuKernels;

struct Tables {
    CpuKernels kernels[3];  // indexed by CpuIsa; an entry the CPU lacks is a copy of the one below it
    bool has_avx2 = false, has_avx512 = false;
    CpuIsa active = CpuIsa::Scalar;
};

bool cpu_supports_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    // libgcc's checks include the OS saving YMM state (XGETBV), not only the CPUID bits.
    __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 15
    // clang 14 (the MK_FUZZ build) does not know "f16c" here: read CPUID leaf 1, ECX bit 29, directly.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
#else
    return false;
#endif
}

// AVX-512 F/BW/VL and VNNI (libgcc's checks include the OS saving ZMM state).
bool cpu_supports_avx512() {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

Tables build_tables() {
    Tables t;
    CpuKernels& scalar = t.kernels[int(CpuIsa::Scalar)];
    quant::add_scalar_dots(scalar);
    quant::add_scalar_q16(scalar);
    CpuKernels& avx2 = t.kernels[int(CpuIsa::Avx2)];
    avx2 = scalar;
    t.has_avx2 = cpu_supports_avx2();
    if (t.has_avx2) {
        quant::add_avx2_dots(avx2);
        quant::add_avx2_k_dots(avx2);
        quant::add_avx2_q16(avx2);
        quant::add_avx2_tile(avx2);
    }
    CpuKernels& avx512 = t.kernels[int(CpuIsa::Avx512)];
    avx512 = avx2;
    t.has_avx512 = t.has_avx2 && cpu_supports_avx512();
    if (t.has_avx512) quant::add_avx512_q16(avx512);
    const char* env = std::getenv("MK_CPU_ISA");
    std::string_view want = env ? env : "auto";
    if (want == "scalar") {
        t.active = CpuIsa::Scalar;
    } else if (want == "avx2") {
        if (!t.has_avx2) fail("MK_CPU_ISA=avx2, but this CPU lacks AVX2, FMA or F16C");
        t.active = CpuIsa::Avx2;
    } else if (want == "avx512") {
        if (!t.has_avx512) fail("MK_CPU_ISA=avx512, but this CPU lacks AVX2, FMA, F16C or AVX-512 F/BW/VL/VNNI");
        t.active = CpuIsa::Avx512;
    } else if (want == "auto" || want.empty()) {
        t.active = t.has_avx512 ? CpuIsa::Avx512 : t.has_avx2 ? CpuIsa::Avx2 : CpuIsa::Scalar;
    } else {
        fail("MK_CPU_ISA={}: expected scalar, avx2, avx512 or auto", want);
    }
    return t;
}

// Built on first use (thread-safe); a bad MK_CPU_ISA throws from the first kernel call.
const Tables& tables() {
    static const Tables t = build_tables();
    return t;
}

// The per-row entry points come here: one guard check and one table load before the kernel.
const CpuKernels& active_kernels() {
    const Tables& t = tables();
    return t.kernels[int(t.active)];
}

const CpuKernels& kernels(CpuIsa isa) {
    const Tables& t = tables();
    if (!cpu_has_isa(isa)) fail("CPU kernels: this CPU lacks {}", cpu_isa_name(isa));
    return t.kernels[int(isa)];
}

// Blocks are 1, 32 or 256 values, so a partial block is a mask test, not a division: dot_row runs
// once per weight row, ~16 ns of work for a 576-value Q4_1 row in the (since removed) q8 mode. Trimming this path (one
// table lookup, no second guard check) took that row from 20.9 to 22.7 GB/s (mk_dot_bench).
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
    fail("{}: no kernel for {} rows (check has_q16_dot first)", what, dtype_name(dtype));
}

float dot_with(const CpuKernels& k, DType dtype, const void* row, const float* x, int64_t n) {
    const uint32_t s = quant::slot(dtype);
    quant::DotFn f = s < quant::kDTypeSlots ? k.dot[s] : nullptr;
    if (!f || n < 0 || (n & block_mask(dtype))) [[unlikely]]
        bad_row(dtype, n, "dot_row");
    return f(static_cast<const uint8_t*>(row), x, n);
}

float dot_q16_with(const CpuKernels& k, DType dtype, const void* row, const BlockQ16* xq, int64_t n) {
    const uint32_t s = quant::slot(dtype);
    quant::DotQ16Fn f = s < quant::kDTypeSlots ? k.dot_q16[s] : nullptr;
    if (!f || n < 0 || (n & block_mask(dtype))) [[unlikely]]
        bad_row(dtype, n, "dot_row_q16");
    return f(static_cast<const uint8_t*>(row), xq, n);
}

void check_activations(int64_t n, const char* what) {
    if (n < 0 || n % 32 != 0) fail("{}: {} values is not a whole number of 32-value blocks", what, n);
}

}  // namespace

CpuIsa cpu_isa() { return tables().active; }

const char* cpu_isa_name(CpuIsa isa) {
    return isa == CpuIsa::Avx512 ? "avx512" : isa == CpuIsa::Avx2 ? "avx2" : "scalar";
}

const char* cpu_isa_name() { return cpu_isa_name(cpu_isa()); }

bool cpu_has_isa(CpuIsa isa) {
    const Tables& t = tables();
    return isa == CpuIsa::Scalar || (isa == CpuIsa::Avx2 && t.has_avx2) || (isa == CpuIsa::Avx512 && t.has_avx512);
}

float dot_row(DType dtype, const void* row, const float* x, int64_t n) {
    return dot_with(active_kernels(), dtype, row, x, n);
}

float dot_row(CpuIsa isa, DType dtype, const void* row, const float* x, int64_t n) {
    return dot_with(kernels(isa), dtype, row, x, n);
}

bool has_q16_dot(DType dtype) {
    const uint32_t s = quant::slot(dtype);
    return s < quant::kDTypeSlots && tables().kernels[0].dot_q16[s] != nullptr;
}

float dot_row_q16(DType dtype, const void* row, const BlockQ16* xq, int64_t n) {
    return dot_q16_with(active_kernels(), dtype, row, xq, n);
}

float dot_row_q16(CpuIsa isa, DType dtype, const void* row, const BlockQ16* xq, int64_t n) {
    return dot_q16_with(kernels(isa), dtype, row, xq, n);
}

void quantize_activations_q16(CpuIsa isa, const float* x, int64_t n, BlockQ16* out) {
    check_activations(n, "quantize_activations_q16");
    kernels(isa).quantize_q16(x, n, out);
}

void dot_row_q16_cols(DType dtype, const void* row, const BlockQ16* xq, int64_t n, int64_t x_stride, uint32_t n_cols,
                      float* out, size_t out_stride) {
    const CpuKernels& k = active_kernels();
    const uint32_t s = quant::slot(dtype);
    quant::DotQ16ColsFn f = s < quant::kDTypeSlots ? k.dot_q16_cols[s] : nullptr;
    if (!f) {
        for (uint32_t j = 0; j < n_cols; ++j) out[j * out_stride] = dot_q16_with(k, dtype, row, xq + j * x_stride, n);
        return;
    }
    if (n < 0 || (n & block_mask(dtype))) [[unlikely]]
        bad_row(dtype, n, "dot_row_q16_cols");
    f(static_cast<const uint8_t*>(row), xq, n, x_stride, n_cols, out, out_stride);
}

void Q16Columns::split(const BlockQ16* xq, int64_t n_values, uint32_t columns) {
    check_activations(n_values, "Q16Columns");
    blocks = xq, n = n_values, n_cols = columns;
    q = nullptr, d = nullptr, sum = nullptr, n_groups = 0;
    const CpuKernels& k = active_kernels();
    bool tile = false;
    for (quant::DotQ16TileFn f : k.dot_q16_tile) tile = tile || f;
    if (!tile) return;
    const int64_t per = n_values / 32;
    n_groups = (columns + 31) / 32 * 2;
    q_storage.assign(size_t(n_groups * per * 512) + 32, 0);  // + 32: room to align the start to 64 bytes
    d_storage.assign(size_t(n_groups * per * 16), 0.0f);
    sum_storage.assign(d_storage.size(), 0.0f);
    int16_t* values = q_storage.data() + (64 - reinterpret_cast<uintptr_t>(q_storage.data()) % 64) % 64 / 2;
    for (uint32_t c = 0; c < columns; ++c)
        for (int64_t b = 0; b < per; ++b) {
            const BlockQ16& x = xq[c * per + b];
            const int64_t group_block = c / 16 * per + b;
            int16_t* pairs = values + group_block * 512 + c % 16 * 2;  // pair p of this column at pairs + 32 p
            for (int p = 0; p < 16; ++p) pairs[32 * p] = x.q[2 * p], pairs[32 * p + 1] = x.q[2 * p + 1];
            d_storage[size_t(group_block * 16 + c % 16)] = x.d;
            sum_storage[size_t(group_block * 16 + c % 16)] = x.sum;
        }
    q = values, d = d_storage.data(), sum = sum_storage.data();
}

void dot_rows_q16_cols(DType dtype, const void* rows, uint32_t n_rows, uint64_t row_bytes, const Q16Columns& cols,
                       float* out, const void* next, uint64_t next_bytes) {
    const CpuKernels& k = active_kernels();
    const uint32_t s = quant::slot(dtype);
    quant::DotQ16TileFn f = s < quant::kDTypeSlots ? k.dot_q16_tile[s] : nullptr;
    // Under 4 columns (the LM head's last token) the tile kernel's decode of the rows would cost more than the dots.
    if (f && cols.q && cols.n_cols >= 4 && !(cols.n & block_mask(dtype))) {
        f(static_cast<const uint8_t*>(rows), n_rows, row_bytes, cols, out, static_cast<const uint8_t*>(next),
          next ? next_bytes : 0);
        return;
    }
    const uint8_t* bytes = static_cast<const uint8_t*>(rows);
    const int64_t per = cols.n / 32;
    for (uint32_t c = 0; c < cols.n_cols; c += 4)
        for (uint32_t r = 0; r < n_rows; ++r)
            dot_row_q16_cols(dtype, bytes + r * row_bytes, cols.blocks + c * per, cols.n, per,
                             std::min(4u, cols.n_cols - c), out + size_t(r) * cols.n_cols + c, 1);
}

void quantize_activations_q16(const float* x, int64_t n, BlockQ16* out) {
    check_activations(n, "quantize_activations_q16");
    active_kernels().quantize_q16(x, n, out);
}

}  // namespace mk

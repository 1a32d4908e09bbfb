// The tensor-core MMA of the PTX seam (mma.m16n8k16, bf16 and f16 in, fp32 accumulate) against a float64 matmul
// (tag [cuda][ops]): on the GPU (mk_cuda_tests, tools/gpu-check.sh) the hardware, on the emulator
// (mk_cuda_emu_tests, CI) its twin (runtime/emu/include/mk_emu/mma.hpp); both with fragments placed by the PTX
// ISA's formulas (runtime/cuda/mma_probe.cu), so one test says the twin and the hardware agree on the layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "runtime/cuda/mma_probe.hpp"

namespace mk {
namespace {

template <typename T>
T* device_copy(const std::vector<T>& host) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, host.size() * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    return static_cast<T*>(p);
}

// Random non-zero inputs exactly representable in the input type, so the float64 reference multiplies the very
// values the MMA does: bf16, a float's top 16 bits; f16, a normal number (sign, exponent 2^-3..2^1, mantissa).
uint16_t random_input(bool f16, std::mt19937& rng) {
    if (f16) return uint16_t((rng() & 1u) << 15 | (12u + rng() % 5u) << 10 | (rng() & 0x3ffu));
    const float v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return uint16_t(bits >> 16);
}

double input_value(bool f16, uint16_t bits) {
    if (f16) {  // the normal numbers random_input makes
        const double magnitude = std::ldexp(1.0 + (bits & 0x3ffu) / 1024.0, int((bits >> 10) & 31u) - 15);
        return bits >> 15 ? -magnitude : magnitude;
    }
    const uint32_t word = uint32_t(bits) << 16;
    float v;
    std::memcpy(&v, &word, 4);
    return v;
}

}  // namespace

TEST_CASE("mma.m16n8k16 (bf16, f16) with the PTX ISA's fragment layout equals a float64 matmul", "[cuda][ops]") {
    std::mt19937 rng(21);
    for (const bool f16 : {false, true}) {
        INFO((f16 ? "f16" : "bf16"));
        std::vector<uint16_t> a(16 * 16), b(16 * 8);  // (16, 16) row major; (16, 8) k by n
        std::vector<float> c(16 * 8), d(16 * 8, 0.0f);
        for (auto& x : a) x = random_input(f16, rng);
        for (auto& x : b) x = random_input(f16, rng);
        for (auto& x : c) x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
        uint16_t* a_dev = device_copy(a);
        uint16_t* b_dev = device_copy(b);
        float* c_dev = device_copy(c);
        float* d_dev = device_copy(d);
        REQUIRE(run_mma_tile(a_dev, b_dev, c_dev, d_dev, f16) == cudaSuccess);
        REQUIRE(cudaMemcpy(d.data(), d_dev, 4 * d.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        // fp32 sums of 16 exact products: within 1e-5 of the largest |D|.
        std::vector<double> want(16 * 8);
        double scale = 0;
        for (uint32_t m = 0; m < 16; ++m)
            for (uint32_t n = 0; n < 8; ++n) {
                double acc = c[m * 8 + n];
                for (uint32_t k = 0; k < 16; ++k) acc += input_value(f16, a[m * 16 + k]) * input_value(f16, b[k * 8 + n]);
                want[m * 8 + n] = acc;
                scale = std::max(scale, std::fabs(acc));
            }
        REQUIRE(scale > 0);
        for (uint32_t i = 0; i < 16 * 8; ++i) {
            INFO("D[" << i / 8 << "][" << i % 8 << "] = " << d[i] << ", want " << want[i]);
            CHECK(std::fabs(d[i] - want[i]) <= 1e-5 * scale);
        }
        for (void* p : {static_cast<void*>(a_dev), static_cast<void*>(b_dev), static_cast<void*>(c_dev),
                        static_cast<void*>(d_dev)})
            cudaFree(p);
    }
}

}  // namespace mk

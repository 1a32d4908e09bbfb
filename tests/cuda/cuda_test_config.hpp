// What the [cuda] tests run on: the real device (mk_cuda_tests, run by tools/gpu-check.sh) or the CUDA
// emulator (mk_cuda_emu_tests: the same sources compiled with MK_CUDA_EMU, run in CI with smaller
// shapes and fewer steps, since every device thread is a fiber on the CPU).
#pragma once
#include <string>

namespace mk::test {

#if defined(MK_CUDA_EMU)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

// "cuda" -> "cuda-emu", "cuda-kernels" -> "cuda-kernels-emu" on the emulator; other names unchanged.
inline std::string cuda_backend(const std::string& name) {
    return kEmulated && name.rfind("cuda", 0) == 0 ? name + "-emu" : name;
}
// The real device's case, or the emulator's smaller one.
template <typename T>
T device_or_emu(T device, T emulated) {
    return kEmulated ? emulated : device;
}

}  // namespace mk::test

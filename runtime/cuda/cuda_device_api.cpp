// The CUDA runtime behind the DeviceApi seam (device_api.hpp): stream queries, sleeps, the steady clock.
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#if defined(MK_CUDA_EMU)
#include <mk_emu/emulator.hpp>
#endif

#include "runtime/cuda/backend_namespace.hpp"
#include "runtime/cuda/device_api.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

class CudaDeviceApi final : public DeviceApi {
public:
    Queue query(int /*device*/, void* stream, std::string& error) override {
        // A stream belongs to its device: the query needs no cudaSetDevice.
        const cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(stream));
        if (status == cudaSuccess) return Queue::idle;
        if (status == cudaErrorNotReady) return Queue::busy;
        error = cudaGetErrorString(status);
        cudaGetLastError();  // a non-sticky error must not be blamed on the next call
        return Queue::failed;
    }
#if defined(MK_CUDA_EMU)
    // The emulated device runs only inside the queries, and its clock is virtual: the host's bounds are
    // measured on that clock (a stalled kernel's time jumps ahead; a slow emulation of a healthy step does not
    // look hung), and a sleep would only slow the emulation down.
    void idle(uint64_t) override { std::this_thread::yield(); }
    uint64_t now_ns() override { return mk_emu::virtual_now_ns(); }
#else
    void idle(uint64_t ns) override {
        if (ns == 0) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
    }
    uint64_t now_ns() override {
        return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count());
    }
#endif
};

}  // namespace

DeviceApi& cuda_device_api() {
    static CudaDeviceApi api;
    return api;
}

MK_CUDA_BACKEND_END
}  // namespace mk

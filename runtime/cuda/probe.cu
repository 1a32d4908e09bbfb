// The CUDA toolchain probe: reports whether a usable device is present without ever linking libcuda.
#include <cuda_runtime.h>

#include "runtime/cuda/probe.hpp"

#include <string>

namespace mk::cuda {
MK_CUDA_BACKEND_BEGIN

namespace {
__global__ void add_one(int* value) { *value += 1; }
}  // namespace

DeviceProbe probe_device() {
    DeviceProbe probe;
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        probe.message = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device";
        cudaGetLastError();  // clear the sticky "no driver" error
        return probe;
    }
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
        probe.message = "cudaGetDeviceProperties failed";
        return probe;
    }
    int* value = nullptr;
    if (cudaMalloc(&value, sizeof(int)) == cudaSuccess) {
        cudaMemset(value, 0, sizeof(int));
        void* args[] = {&value};
        cudaLaunchKernel(add_one, dim3(1), dim3(1), args, 0, nullptr);
        int host = 0;
        probe.kernel_ran = cudaMemcpy(&host, value, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess && host == 1;
        cudaFree(value);
    }
    probe.device_count = count;
    for (int a = 0; a < count; ++a)
        for (int b = a + 1; b < count; ++b) {
            int ab = 0, ba = 0, atomics = 0;
            cudaDeviceCanAccessPeer(&ab, a, b);
            cudaDeviceCanAccessPeer(&ba, b, a);
            cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b);
            if (!ab || !ba || !atomics)
                probe.unpaired.push_back(std::to_string(a) + "-" + std::to_string(b) +
                                         (!ab || !ba ? " (no peer access)" : " (no peer atomics)"));
        }
    cudaGetLastError();
    probe.available = true;
    probe.name = props.name;
    probe.sm_count = props.multiProcessorCount;
    probe.smem_optin_bytes = props.sharedMemPerBlockOptin;
    probe.message = "ok";
    return probe;
}

MK_CUDA_BACKEND_END
}  // namespace mk::cuda

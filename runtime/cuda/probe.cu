// The CUDA toolchain probe: reports whether a usable device is present without ever linking libcuda.
#include <cuda_runtime.h>

#include "runtime/cuda/probe.hpp"

namespace mk::cuda {

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
        add_one<<<1, 1>>>(value);
        int host = 0;
        probe.kernel_ran = cudaMemcpy(&host, value, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess && host == 1;
        cudaFree(value);
    }
    probe.available = true;
    probe.name = props.name;
    probe.sm_count = props.multiProcessorCount;
    probe.smem_optin_bytes = props.sharedMemPerBlockOptin;
    probe.message = "ok";
    return probe;
}

}  // namespace mk::cuda

// The host side of the CUDA emulator: the subset of the CUDA runtime API mk's host code calls, with the
// same names and meanings, declared in namespace mk_emu (so a binary may also link the real runtime)
// and made visible unqualified to the emulated build's sources.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mk_emu/types.hpp"

namespace mk_emu {

enum cudaError_t : int {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorUnknown = 999,
};
using cudaError = cudaError_t;

struct Stream;
struct GraphRecord;
using cudaStream_t = Stream*;
using cudaGraph_t = GraphRecord*;
using cudaGraphExec_t = GraphRecord*;

enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
enum cudaDeviceP2PAttr { cudaDevP2PAttrPerformanceRank = 1, cudaDevP2PAttrAccessSupported = 2,
                         cudaDevP2PAttrNativeAtomicSupported = 3 };
inline constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaHostAllocDefault = 0, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2;

// cudaLaunchKernelEx's configuration, with the one attribute mk uses: programmatic dependent launch.
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
    int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    size_t sharedMemPerMultiprocessor;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsPerMultiProcessor;
    int maxBlocksPerMultiProcessor;
    int multiProcessorCount;
    int major, minor;
    int cooperativeLaunch;
    int canMapHostMemory;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int src, int dst);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
    return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaHostAlloc(T** ptr, size_t bytes, unsigned flags) {
    return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}

// A kernel launch as the emulator runs it: `body` runs the kernel function in the calling fiber.
struct LaunchSpec {
    const void* kernel;
    dim3 grid, block;
    size_t dynamic_smem;
    cudaStream_t stream;
    bool cooperative;
    std::function<void()> body;
    // Programmatic dependent launch: the kernel may start once every block of the stream's previous kernel
    // has run griddepcontrol.launch_dependents (or exited); its griddepcontrol.wait waits for that kernel's end.
    bool programmatic = false;
};
cudaError_t launch(LaunchSpec spec);
cudaError_t set_kernel_attribute(const void* kernel, cudaFuncAttribute attr, int value);

template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
    return set_kernel_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}

namespace detail {
template <typename... P, size_t... I>
std::function<void()> bind_kernel(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    // The arguments are copied at launch, as the driver copies the parameter buffer.
    auto copied = std::make_shared<std::tuple<std::decay_t<P>...>>(*static_cast<std::decay_t<P>*>(args[I])...);
    return [kernel, copied] { std::apply(kernel, *copied); };
}
}  // namespace detail

template <typename... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t smem = 0,
                             cudaStream_t stream = nullptr) {
    return launch({reinterpret_cast<const void*>(kernel), grid, block, smem, stream, false,
                   detail::bind_kernel(kernel, args, std::index_sequence_for<P...>{})});
}
// The toolkit's field order (grid, block, dynamic shared memory, stream, attributes, their count), so code
// fills it positionally: the emulator's gridDim/blockDim are built-in macros, not field names.
struct cudaLaunchConfig_t {
    dim3 grid_dim, block_dim;
    size_t dynamicSmemBytes = 0;
    cudaStream_t stream = nullptr;
    cudaLaunchAttribute* attrs = nullptr;
    unsigned numAttrs = 0;
};
// The C++ form: the kernel's arguments by value. Attributes other than programmatic serialization are refused.
template <typename... P, typename... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
    bool programmatic = false;
    for (unsigned i = 0; i < config->numAttrs; ++i) {
        if (config->attrs[i].id != cudaLaunchAttributeProgrammaticStreamSerialization) return cudaErrorInvalidValue;
        programmatic = config->attrs[i].val.programmaticStreamSerializationAllowed != 0;
    }
    auto copied = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    return launch({reinterpret_cast<const void*>(kernel), config->grid_dim, config->block_dim, config->dynamicSmemBytes,
                   config->stream, false, [kernel, copied] { std::apply(kernel, *copied); }, programmatic});
}
template <typename... P>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t smem = 0,
                                        cudaStream_t stream = nullptr) {
    return launch({reinterpret_cast<const void*>(kernel), grid, block, smem, stream, true,
                   detail::bind_kernel(kernel, args, std::index_sequence_for<P...>{})});
}

}  // namespace mk_emu

using namespace mk_emu;  // the emulated build's sources call the API unqualified, as with CUDA

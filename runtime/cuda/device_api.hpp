// The seam between the host and a device: the few non-blocking calls every host wait on a kernel is
// built from, so that no wait can hang. Implemented by the CUDA runtime (cuda_device_api(), mk_cuda), by
// the CUDA emulator, and by scripted fakes in the CPU tests (a stuck kernel, one that ignores the abort).
// Also the process-wide claim that keeps a second resident megakernel off a device. Plain C++.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "runtime/cuda/backend_namespace.hpp"

namespace mk {

class DeviceApi {
public:
    enum class Queue { busy, idle, failed };
    virtual ~DeviceApi() = default;
    // Never blocks: whether the work queued on `stream` (a cudaStream_t) of `device` has ended; `failed`,
    // with the reason in `error`, when it ended in an error.
    virtual Queue query(int device, void* stream, std::string& error) = 0;
    // The host has nothing to do for about `ns` (0: just yield): a real device sleeps; an emulated or
    // fake device driven by the host thread runs meanwhile.
    virtual void idle(uint64_t ns) = 0;
    // The clock every host bound is measured on (ns, monotonic); an emulator or fake may run its own.
    virtual uint64_t now_ns() = 0;
};

// The DeviceApi the CUDA Programs (cuda_program.cpp, kernels_program.cpp) wait through. A build links one
// definition: mk_cuda's (cuda_device_api.cpp, the CUDA runtime: stream queries and sleeps), or the
// emulator's (the same file compiled for it: its stream queries run the emulated device). Each in its
// backend's inline namespace (backend_namespace.hpp), so both may link into one binary.
MK_CUDA_BACKEND_BEGIN
DeviceApi& cuda_device_api();
MK_CUDA_BACKEND_END

struct StreamRef {
    int device = 0;
    void* stream = nullptr;
};
enum class WaitEnd { idle, failed, timed_out };
// Polls until every stream is idle, one failed (`error` says which and why) or `limit_ns` has passed.
WaitEnd wait_streams(DeviceApi& api, std::span<const StreamRef> streams, uint64_t limit_ns, std::string& error);

// One resident megakernel per device, alone: it holds every SM's shared memory for its whole life, so
// nothing else launched on that device (a second resident kernel, a stepwise or kernel-per-op step)
// could ever start, and freeing device memory (cudaFree waits for the device) would wait for it
// forever. So every CUDA Program claims its devices before it allocates anything: a resident claim
// needs the device to itself, a shared one (stepwise, kernel-per-op) only that no resident kernel
// holds it. Process-wide; a refusal is an mk::Error naming the holders.
class DeviceClaim {
public:
    enum class Kind { resident, shared };
    DeviceClaim() = default;
    DeviceClaim(int device, Kind kind, std::string holder);
    ~DeviceClaim();
    DeviceClaim(DeviceClaim&& other) noexcept : device_(other.device_), id_(other.id_) { other.device_ = -1; }
    DeviceClaim& operator=(DeviceClaim&& other) noexcept;
    // The program's kernel would not end: the device stays claimed (by its name) until the process exits.
    void keep_forever() { device_ = -1; }

private:
    int device_ = -1;
    uint64_t id_ = 0;
};

}  // namespace mk

// The emulator's CUDA runtime API: memory is host memory (registered, so device code can be checked
// against it), streams queue work that the device runs only while the host waits on it, and a failed
// kernel leaves its stream with the emulator's report as the error text.
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/emu/engine.hpp"

namespace mk_emu {

namespace {
thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

using Lock = std::lock_guard<std::recursive_mutex>;

Engine& locked_engine() {
    Engine& e = engine();
    if (e.devices.empty()) e.reset(e.config);
    return e;
}

cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

Device& current_device() { return engine().device(t_device); }

Stream& resolve(cudaStream_t s) { return s ? *s : *current_device().streams[0]; }

cudaError_t enqueue(Stream& s, Op op) {
    if (s.capture) {
        s.capture->push_back(std::move(op));
        return cudaSuccess;
    }
    s.queue.push_back(std::move(op));
    return cudaSuccess;
}

// A failed launch's error is returned once, by the next call that synchronizes with its stream (the real
// driver makes such an error sticky for the whole context; the emulator keeps the device usable).
cudaError_t take_error(Stream& s) {
    const cudaError_t e = s.error;
    s.error = cudaSuccess;
    return e;
}

// What a synchronous call waits for first: the legacy default stream orders against blocking streams.
cudaError_t sync_stream(Stream& s) {
    Engine& e = engine();
    Device& d = *s.device;
    e.drive(d, Until::stream_idle, &s);
    return take_error(s);
}

// Whole pages, so that the pages a bulk copy reads can be write-protected (async_proxy.cpp) without
// touching another allocation (and 256-byte aligned, as cudaMalloc's are).
void* page_block(size_t bytes) {
    const size_t page = Engine::page_bytes();
    return std::aligned_alloc(page, (bytes + page - 1) / page * page);
}

cudaError_t allocate(void** ptr, size_t bytes, AllocKind kind) {
    Engine& e = locked_engine();
    void* p = page_block(std::max<size_t>(bytes, 1));
    void* raw = p;
    if (!p) return record(cudaErrorMemoryAllocation);
    std::memset(p, 0xcd, bytes);  // fresh device memory is garbage, not zero
    e.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{std::max<size_t>(bytes, 1), kind, t_device, e.next_alloc_id++, raw};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t release(void* p) {
    if (!p) return cudaSuccess;
    Engine& e = locked_engine();
    auto it = e.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == e.allocations.end()) return record(cudaErrorInvalidDevicePointer);
    e.unwatch(it->first, it->second.bytes);
    std::free(it->second.raw);
    e.allocations.erase(it);
    return cudaSuccess;
}
}  // namespace

void configure(const Config& c) {
    Lock lock(engine().mutex);
    engine().reset(c);
}
const Config& config() { return engine().config; }
std::string last_report() {
    Lock lock(engine().mutex);
    return engine().report;
}
uint64_t decisions() { return engine().decisions; }
ProgrammaticLaunches programmatic_launches() {
    Lock lock(engine().mutex);
    return engine().programmatic;
}
uint64_t virtual_now_ns() {
    Lock lock(engine().mutex);
    return engine().now_ns();
}

cudaError_t cudaGetDeviceCount(int* count) {
    Lock lock(engine().mutex);
    *count = int(locked_engine().devices.size());
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    *device = t_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    Lock lock(engine().mutex);
    if (device < 0 || size_t(device) >= locked_engine().devices.size()) return record(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    Lock lock(engine().mutex);
    Engine& e = locked_engine();
    if (device < 0 || size_t(device) >= e.devices.size()) return record(cudaErrorInvalidDevice);
    const Config& c = e.config;
    std::memset(p, 0, sizeof *p);
    std::snprintf(p->name, sizeof p->name, "mk CUDA emulator (%u SMs)", c.n_sms);
    p->totalGlobalMem = c.global_bytes;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = c.smem_per_block_optin;
    p->sharedMemPerMultiprocessor = c.smem_per_sm;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsPerMultiProcessor = int(c.max_threads_per_sm);
    p->maxBlocksPerMultiProcessor = int(c.max_blocks_per_sm);
    p->multiProcessorCount = int(c.n_sms);
    p->major = 9;
    p->minor = 0;
    p->cooperativeLaunch = 1;
    p->canMapHostMemory = 1;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    Lock lock(engine().mutex);
    *free_bytes = *total_bytes = locked_engine().config.global_bytes;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    Lock lock(engine().mutex);
    Engine& e = locked_engine();
    Device& d = current_device();
    e.drive(d, Until::device_idle, nullptr);
    cudaError_t first = cudaSuccess;
    for (auto& s : d.streams)
        if (const cudaError_t err = take_error(*s); first == cudaSuccess) first = err;
    return record(first);
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) {
    *can = 1;  // every emulated device's memory is the host's
    return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return cudaSuccess; }
cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr, int, int) {
    *value = 1;
    return cudaSuccess;
}
cudaError_t cudaGetLastError() {
    const cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
    default: return "cudaErrorUnknown";
    }
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorLaunchFailure: {
        // The emulator's report is the useful part; it stays valid until the next fault.
        static thread_local std::string text;
        Lock lock(engine().mutex);
        text = "unspecified launch failure: " + engine().report;
        return text.c_str();
    }
    default: return "unknown error";
    }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    Lock lock(engine().mutex);
    return allocate(ptr, bytes, AllocKind::device);
}
cudaError_t cudaFree(void* ptr) {
    Lock lock(engine().mutex);
    return release(ptr);
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
    Lock lock(engine().mutex);
    return allocate(ptr, bytes, AllocKind::host_mapped);
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
    Lock lock(engine().mutex);
    return allocate(ptr, bytes, AllocKind::host_mapped);
}
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned) {
    Lock lock(engine().mutex);
    const Allocation* a = locked_engine().find(host);
    if (!a || a->kind != AllocKind::host_mapped) return record(cudaErrorInvalidValue);
    *device = host;  // mapped memory has one address on both sides (unified addressing)
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
    Lock lock(engine().mutex);
    return release(ptr);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
    Lock lock(engine().mutex);
    locked_engine();
    if (const cudaError_t e = sync_stream(*current_device().streams[0]); e != cudaSuccess) return record(e);
    engine().ensure_segv_handler();  // the host may write pages bulk copies read
    std::memset(ptr, value, bytes);
    ++current_device().progress;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
    Lock lock(engine().mutex);
    locked_engine();
    if (const cudaError_t e = sync_stream(*current_device().streams[0]); e != cudaSuccess) return record(e);
    engine().ensure_segv_handler();  // the host may write pages bulk copies read
    std::memmove(dst, src, bytes);
    ++current_device().progress;
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    Lock lock(engine().mutex);
    locked_engine();
    Op op{Op::set};
    op.dst = ptr;
    op.value = value;
    op.bytes = bytes;
    return enqueue(resolve(stream), std::move(op));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
    Lock lock(engine().mutex);
    locked_engine();
    Op op{Op::copy};
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    return enqueue(resolve(stream), std::move(op));
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t bytes) {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
    Lock lock(engine().mutex);
    locked_engine();
    Device& d = current_device();
    auto s = std::make_unique<Stream>();
    s->device = &d;
    s->blocking = !(flags & cudaStreamNonBlocking);
    *stream = s.get();
    d.streams.push_back(std::move(s));
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return cudaSuccess;
    Lock lock(engine().mutex);
    Device& d = *stream->device;
    // Destroying a stream with work queued lets that work finish first, as the driver does.
    engine().drive(d, Until::stream_idle, stream);
    for (auto it = d.streams.begin(); it != d.streams.end(); ++it)
        if (it->get() == stream) {
            if (stream->idle()) d.streams.erase(it);
            break;
        }
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    Lock lock(engine().mutex);
    locked_engine();
    Stream& s = resolve(stream);
    engine().drive(*s.device, Until::slice, &s);
    if (s.error != cudaSuccess) return take_error(s);
    return s.idle() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    Lock lock(engine().mutex);
    locked_engine();
    return record(sync_stream(resolve(stream)));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
    Lock lock(engine().mutex);
    locked_engine();
    Stream& s = resolve(stream);
    if (!stream || s.capture) return record(cudaErrorStreamCaptureUnsupported);
    s.capture = std::make_unique<std::vector<Op>>();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    Lock lock(engine().mutex);
    Stream& s = resolve(stream);
    if (!s.capture) return record(cudaErrorInvalidValue);
    *graph = new GraphRecord{std::make_shared<const std::vector<Op>>(std::move(*s.capture))};
    s.capture.reset();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    *exec = new GraphRecord{graph->ops};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    Lock lock(engine().mutex);
    Op op{Op::graph};
    op.ops = exec->ops;
    return enqueue(resolve(stream), std::move(op));
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

cudaError_t set_kernel_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
    Lock lock(engine().mutex);
    Engine& e = locked_engine();
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        uint64_t(value) > e.config.smem_per_block_optin)
        return record(cudaErrorInvalidValue);
    current_device().max_dynamic_smem[kernel] = value;
    return cudaSuccess;
}

cudaError_t launch(LaunchSpec spec) {
    Lock lock(engine().mutex);
    Engine& e = locked_engine();
    Stream& s = resolve(spec.stream);
    Device& d = *s.device;
    const uint64_t threads = uint64_t(spec.block.x) * spec.block.y * spec.block.z;
    const uint64_t blocks = uint64_t(spec.grid.x) * spec.grid.y * spec.grid.z;
    if (threads == 0 || threads > 1024 || blocks == 0) return record(cudaErrorInvalidConfiguration);
    auto attr = d.max_dynamic_smem.find(spec.kernel);
    const uint64_t allowed = attr == d.max_dynamic_smem.end() ? 48 * 1024 : uint64_t(attr->second);
    if (spec.dynamic_smem > allowed) {
        e.report = "CUDA emulator: a launch asks for " + std::to_string(spec.dynamic_smem) +
                   " bytes of dynamic shared memory; the kernel allows " + std::to_string(allowed) +
                   (attr == d.max_dynamic_smem.end() ? " (without cudaFuncAttributeMaxDynamicSharedMemorySize)" : "");
        return record(cudaErrorInvalidValue);
    }
    if (spec.cooperative) {
        // Could the whole grid ever be resident, on an empty device?
        const Config& c = e.config;
        const uint64_t tw = (threads + 31) / 32 * 32;
        const uint64_t per_sm = std::min<uint64_t>({c.max_threads_per_sm / tw, c.max_blocks_per_sm,
                                                    c.smem_per_sm / (spec.dynamic_smem + 1024)});
        if (blocks > per_sm * c.n_sms || blocks * tw > c.max_live_threads)
            return record(cudaErrorCooperativeLaunchTooLarge);
    }
    Op op{Op::kernel};
    op.spec = std::move(spec);
    return enqueue(s, std::move(op));
}

}  // namespace mk_emu

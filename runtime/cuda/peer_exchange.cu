// The peer exchange (see peer_exchange.hpp). The NCCL path is thin on purpose: NCCL only allocates and
// registers the memory and names the peers' addresses; the interpreter's transfer instructions do the
// writes and signals themselves, through the same pointer tables --tp-loopback exercises on one GPU.
#include "runtime/cuda/peer_exchange.hpp"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include "models/error.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/nccl_library.hpp"

#if MK_HAVE_NCCL_HEADERS
#include <nccl.h>
#include <nccl_device.h>
#endif

namespace mk {
MK_CUDA_BACKEND_BEGIN

namespace {

#if MK_HAVE_NCCL_HEADERS
// Where every rank's window starts, as this rank's device addresses it.
__global__ void peer_pointers_kernel(ncclWindow_t window, uint32_t n_ranks, void** out) {
    for (uint32_t r = threadIdx.x; r < n_ranks; r += blockDim.x) out[r] = ncclGetPeerPointer(window, 0, int(r));
}

template <typename F>
F* nccl_function(const char* name) {
    return reinterpret_cast<F*>(cuda::nccl_symbol(name));
}
#endif

}  // namespace

std::unique_ptr<PeerExchange> PeerExchange::open(const std::vector<int>& devices, uint64_t arena_bytes,
                                                 uint64_t counter_bytes) {
    std::unique_ptr<PeerExchange> x(new PeerExchange());
    x->devices_ = devices;
    x->counter_offset_ = align_up(arena_bytes, kBufferAlignBytes);
    x->buffer_bytes_ = x->counter_offset_ + counter_bytes;
    const uint32_t n = uint32_t(devices.size());
    // Both paths signal peers with system-scope atomics on their memory: NVLink has them, most PCIe paths not.
    for (uint32_t a = 0; a < n; ++a)
        for (uint32_t b = 0; b < n; ++b) {
            if (a == b) continue;
            int access = 0, atomics = 0;
            check_cuda(cudaDeviceCanAccessPeer(&access, devices[a], devices[b]), "cudaDeviceCanAccessPeer");
            check_cuda(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, devices[a], devices[b]),
                       "cudaDeviceGetP2PAttribute");
            if (!access || !atomics)
                fail("--tp {}: GPU {} cannot {} GPU {}'s memory; the in-kernel transfers need a peer path with "
                     "atomics (NVLink)", n, devices[a], access ? "use atomics on" : "reach", devices[b]);
        }
    std::string why_not;
    if (!x->open_nccl(why_not)) {
        x->close_nccl();
        x->open_peer_access();
        x->path_ = fmt::format("CUDA peer access (NCCL not used: {})", why_not);
    }
    return x;
}

PeerExchange::~PeerExchange() {
    if (nccl_) {
        close_nccl();
        return;
    }
    for (uint32_t r = 0; r < buffers_.size(); ++r)
        if (buffers_[r]) {
            cudaSetDevice(devices_[r]);
            cudaFree(buffers_[r]);
        }
}

ExchangeRegion PeerExchange::region_at(void* base) const {
    uint8_t* bytes = static_cast<uint8_t*>(base);
    return {bytes, reinterpret_cast<uint64_t*>(bytes + counter_offset_)};
}

bool PeerExchange::open_nccl(std::string& why_not) {
#if MK_HAVE_NCCL_HEADERS
    const cuda::NcclStatus status = cuda::probe_nccl();
    if (!status.usable) {
        why_not = status.message;
        return false;
    }
    const auto error_string = nccl_function<decltype(ncclGetErrorString)>("ncclGetErrorString");
    auto ok = [&](ncclResult_t r, const char* what) {
        if (r != ncclSuccess) why_not = fmt::format("{}: {}", what, error_string(r));
        return r == ncclSuccess;
    };
    const uint32_t n = uint32_t(devices_.size());
    const uint64_t bytes = buffer_bytes_;
    nccl_ = true;  // from here on close_nccl() releases what exists
    std::vector<ncclComm_t> comms(n);
    if (!ok(nccl_function<decltype(ncclCommInitAll)>("ncclCommInitAll")(comms.data(), int(n), devices_.data()),
            "ncclCommInitAll"))
        return false;
    comms_.assign(comms.begin(), comms.end());
    buffers_.assign(n, nullptr);
    for (uint32_t r = 0; r < n; ++r) {
        check_cuda(cudaSetDevice(devices_[r]), "cudaSetDevice");
        if (!ok(nccl_function<decltype(ncclMemAlloc)>("ncclMemAlloc")(&buffers_[r], bytes), "ncclMemAlloc")) return false;
        check_cuda(cudaMemset(buffers_[r], 0, bytes), "zeroing the exchange window");
    }
    // Registration is collective over the communicators, which this one thread drives together.
    std::vector<ncclWindow_t> windows(n, nullptr);
    nccl_function<decltype(ncclGroupStart)>("ncclGroupStart")();
    for (uint32_t r = 0; r < n; ++r)
        nccl_function<decltype(ncclCommWindowRegister)>("ncclCommWindowRegister")(comms[r], buffers_[r], bytes, &windows[r],
                                                                                  NCCL_WIN_COLL_SYMMETRIC);
    const bool registered = ok(nccl_function<decltype(ncclGroupEnd)>("ncclGroupEnd")(), "ncclCommWindowRegister");
    windows_.assign(windows.begin(), windows.end());
    if (!registered) return false;
    view_.assign(n, std::vector<ExchangeRegion>(n));
    for (uint32_t v = 0; v < n; ++v) {
        check_cuda(cudaSetDevice(devices_[v]), "cudaSetDevice");
        DeviceBuffer out(sizeof(void*) * n, "peer pointers");
        peer_pointers_kernel<<<1, 32>>>(windows[v], n, out.as<void*>());
        check_cuda(cudaGetLastError(), "the peer-pointer kernel");
        std::vector<void*> bases(n);
        check_cuda(cudaMemcpy(bases.data(), out.as<void>(), sizeof(void*) * n, cudaMemcpyDeviceToHost), "peer pointers");
        for (uint32_t o = 0; o < n; ++o) view_[v][o] = region_at(bases[o]);
    }
    path_ = fmt::format("NCCL {} symmetric windows ({})", cuda::nccl_version_string(status.version), status.library);
    return true;
#else
    why_not = "this mk was built without NCCL headers";
    return false;
#endif
}

void PeerExchange::close_nccl() {
#if MK_HAVE_NCCL_HEADERS
    if (!nccl_) return;
    for (uint32_t r = 0; r < windows_.size(); ++r)
        if (windows_[r])
            nccl_function<decltype(ncclCommWindowDeregister)>("ncclCommWindowDeregister")(
                static_cast<ncclComm_t>(comms_[r]), static_cast<ncclWindow_t>(windows_[r]));
    for (uint32_t r = 0; r < buffers_.size(); ++r)
        if (buffers_[r]) {
            cudaSetDevice(devices_[r]);
            nccl_function<decltype(ncclMemFree)>("ncclMemFree")(buffers_[r]);
        }
    for (void* comm : comms_)
        if (comm) nccl_function<decltype(ncclCommDestroy)>("ncclCommDestroy")(static_cast<ncclComm_t>(comm));
#endif
    windows_.clear();
    buffers_.clear();
    comms_.clear();
    view_.clear();
    nccl_ = false;
}

void PeerExchange::open_peer_access() {
    const uint32_t n = uint32_t(devices_.size());
    for (uint32_t a = 0; a < n; ++a) {
        check_cuda(cudaSetDevice(devices_[a]), "cudaSetDevice");
        for (uint32_t b = 0; b < n; ++b) {
            if (a == b) continue;
            const cudaError_t e = cudaDeviceEnablePeerAccess(devices_[b], 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
            else check_cuda(e, "cudaDeviceEnablePeerAccess");
        }
    }
    const uint64_t bytes = buffer_bytes_;
    buffers_.assign(n, nullptr);
    std::vector<ExchangeRegion> own(n);
    for (uint32_t r = 0; r < n; ++r) {
        check_cuda(cudaSetDevice(devices_[r]), "cudaSetDevice");
        check_cuda(cudaMalloc(&buffers_[r], bytes), "the exchange region");
        check_cuda(cudaMemset(buffers_[r], 0, bytes), "zeroing the exchange region");
        own[r] = region_at(buffers_[r]);
    }
    view_.assign(n, own);  // unified addressing: the owner's pointer is valid on every peer
}

MK_CUDA_BACKEND_END
}  // namespace mk

// The memory tensor-parallel ranks on separate GPUs write into each other's: every rank's arena region
// and counter array, addressable from every peer's device. Through NCCL when it loads (communicators for
// the local GPUs, one symmetric window per rank, peer pointers from the device API's ncclGetPeerPointer),
// else through CUDA peer access (cudaDeviceEnablePeerAccess; under unified addressing a peer's own
// pointer is valid on every device). Host code over the CUDA runtime; built only with CUDA.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mk {
MK_CUDA_BACKEND_BEGIN

struct ExchangeRegion {
    uint8_t* arena = nullptr;      // the rank's region of the arena (its first byte)
    uint64_t* counters = nullptr;  // its counter array
};

class PeerExchange {
public:
    // One region of arena_bytes and counter_bytes (zeroed) per device, rank r on devices[r]. Throws
    // mk::Error when neither path works (a pair of GPUs that cannot reach each other, no memory).
    static std::unique_ptr<PeerExchange> open(const std::vector<int>& devices, uint64_t arena_bytes,
                                              uint64_t counter_bytes);
    ~PeerExchange();
    PeerExchange(const PeerExchange&) = delete;
    PeerExchange& operator=(const PeerExchange&) = delete;

    // Rank `owner`'s region as rank `viewer`'s device addresses it (viewer == owner: its own memory).
    const ExchangeRegion& region(uint32_t viewer, uint32_t owner) const { return view_[viewer][owner]; }
    // Which path runs, for the user: "NCCL 2.28.9 symmetric windows" or "CUDA peer access (...)".
    const std::string& path() const { return path_; }

private:
    PeerExchange() = default;
    bool open_nccl(std::string& why_not);
    void open_peer_access();
    void close_nccl();
    // The arena region and counters of the buffer at `base` (as some device addresses it).
    ExchangeRegion region_at(void* base) const;

    std::vector<int> devices_;
    uint64_t counter_offset_ = 0, buffer_bytes_ = 0;  // per rank: arena region (256-byte aligned), then counters
    std::vector<std::vector<ExchangeRegion>> view_;  // [viewer][owner]
    std::vector<void*> buffers_;                     // by rank, on its device
    bool nccl_ = false;
    std::vector<void*> comms_, windows_;             // ncclComm_t, ncclWindow_t by rank
    std::string path_;
};

MK_CUDA_BACKEND_END
}  // namespace mk

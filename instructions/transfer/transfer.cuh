// transfer on the device: the team copies `bytes` from its rank's arena at src_off into the peer's arena
// (ctx.ranks[dst_rank]: another allocation in loopback, another GPU's memory through a peer pointer
// otherwise) at dst_off, 16 bytes a thread when both ends and the length allow (most blocks), else 4.
// No fence of its own: the interpreter publishes the team's stores with the team barrier, then a
// system-scope fence and release add of the signal on the peer's counter, which the peer acquires at
// system scope.
#pragma once
#include "instructions/device.cuh"
#include "instructions/transfer/transfer.hpp"

namespace mk {

struct TransferDevice {
    template <class Tiles>
    static __device__ void run(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles&) {
        const auto a = decode_args<TransferArgs>(ins);
        const uint8_t* src = ctx.arena + a.src_off;  // the arena is 256-byte aligned: offsets decide alignment
        uint8_t* dst = ctx.ranks[a.dst_rank].arena + a.dst_off;
        if (((a.src_off | a.dst_off | a.bytes) & 15u) == 0) {
            const uint4* s = reinterpret_cast<const uint4*>(src);
            uint4* d = reinterpret_cast<uint4*>(dst);
            for (uint32_t i = team.rank; i < a.bytes / 16; i += team.size) d[i] = s[i];
        } else {
            const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
            uint32_t* d = reinterpret_cast<uint32_t*>(dst);
            for (uint32_t i = team.rank; i < a.bytes / 4; i += team.size) d[i] = s[i];
        }
    }
};

}  // namespace mk

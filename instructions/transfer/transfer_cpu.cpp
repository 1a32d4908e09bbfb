// transfer on the CPU: each emulated rank has its own arena (OpContext::rank_arenas), so a remote write is a
// copy into the peer's.
#include "instructions/transfer/transfer.hpp"

#include <cstring>

#include <fmt/format.h>

namespace mk {

void TransferOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<TransferArgs>(ins);
    std::memcpy(ctx.rank_arenas[a.dst_rank] + a.dst_off, ctx.arena + a.src_off, a.bytes);
}

std::string TransferOp::describe(const Instruction& ins) {
    auto a = decode_args<TransferArgs>(ins);
    return fmt::format("transfer {} bytes @{} -> rank {} @{}", a.bytes, a.src_off, a.dst_rank, a.dst_off);
}

}  // namespace mk

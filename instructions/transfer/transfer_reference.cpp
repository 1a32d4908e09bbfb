// transfer's reference and cases: the bytes of a block, bit for bit, in the peer rank's region.
#include "instructions/transfer/transfer.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> TransferOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<TransferArgs>(ins);
    return {ref_arena(fmt::format("rank {}'s block", a.dst_rank), a.dst_off, ref_f32(b, a.src_off, a.bytes / 4))};
}

std::vector<OpCase> TransferOp::cases(uint64_t seed) {
    struct Shape { uint32_t n_ranks, src_rank, dst_rank, n; };
    std::vector<OpCase> out;
    // 52 values: 208 bytes, not a multiple of 16 (the device's narrow path); 256: the wide one.
    for (const Shape& s : {Shape{2, 0, 1, 52}, Shape{3, 2, 0, 256}, Shape{4, 1, 3, 64}}) {
        CaseBuilder c(ModelDims{}, seed++, s.n_ranks, 4096);
        c.activation(3, 1.0f, s.src_rank);  // the block does not start the region
        const uint32_t src = c.activation(s.n, 1.0f, s.src_rank), dst = c.activation(s.n, 1.0f, s.dst_rank);
        out.push_back(c.finish(fmt::format("transfer {} bytes rank {} -> {} of {}", 4 * s.n, s.src_rank, s.dst_rank, s.n_ranks),
                               make_instruction<TransferOp>({src, dst, 4 * s.n, s.dst_rank})));
    }
    return out;
}

}  // namespace mk

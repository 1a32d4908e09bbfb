// transfer: the tensor-parallel exchange. Copies a finished block of one rank's activations into a peer
// rank's buffer; the instruction's signal then bumps the peer's counter, so the peer's consumer waits
// for the data it reads and nothing else. In a combined schedule every rank's buffers are regions of
// one arena (CPU emulation, --tp-loopback); on separate GPUs dst_rank picks the peer's memory.
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct TransferArgs {
    uint32_t src_off;   // this rank's finished block
    uint32_t dst_off;   // the same block's place in the peer's receive buffer
    uint32_t bytes;     // a multiple of 4
    uint32_t dst_rank;  // the peer (the link cost model and the rank check use it)
};

struct TransferOp {
    static constexpr Opcode opcode = Opcode::transfer;
    using Args = TransferArgs;
    // Its write lands in dst_rank's memory and its signals bump dst_rank's counters.
    MK_HOST_DEVICE static Effects effects(const Instruction& ins) {
        return {decode_args<TransferArgs>(ins).dst_rank, kNoOffset};
    }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<TransferArgs>(ins);
        return {{Space::arena, a.src_off, uint64_t(a.src_off) + a.bytes, false},
                {Space::arena, a.dst_off, uint64_t(a.dst_off) + a.bytes, true}};
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat*) {
        auto a = decode_args<TransferArgs>(ins);
        Cost c{0, a.bytes, 0};
        c.link_bytes = a.bytes;
        return c;
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (transfer_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{0};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

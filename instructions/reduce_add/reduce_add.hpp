// reduce_add: the tensor-parallel sum. x[rows] += recv[0][rows] + recv[1][rows] + ... in rank order,
// where recv[k] is rank k's partial result (the O- or down-projection over its heads or FFN columns).
// Every rank adds the same bits in the same order, so the replicated residual stays identical.
#pragma once
#include "instructions/registry.hpp"

namespace mk {

struct ReduceAddArgs {
    uint32_t x_off;       // (d_model) fp32 residual stream
    uint32_t recv_off;    // (n_slots, d_model) fp32 partial results, one slot per rank
    uint32_t slot_bytes;  // stride between slots
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t n_slots;
};

struct ReduceAddOp {
    static constexpr Opcode opcode = Opcode::reduce_add;
    using Args = ReduceAddArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static constexpr uint32_t kMaxSlots = 64;  // the largest TP size
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<ReduceAddArgs>(ins);
        if (a.n_slots == 0 || a.n_slots > kMaxSlots) fail_slots(a);  // one access per slot: refuse a fuzzed count
        const uint64_t rows = 4ull * a.row_begin, bytes = 4ull * a.n_rows;
        std::vector<Access> out{{Space::arena, a.x_off + rows, a.x_off + rows + bytes, true}};
        for (uint32_t k = 0; k < a.n_slots; ++k) {
            const uint64_t slot = a.recv_off + uint64_t(k) * a.slot_bytes + rows;
            out.push_back({Space::arena, slot, slot + bytes, false});
        }
        return out;
    }
    static std::vector<uint32_t> weights(const Instruction&) { return {}; }
    static PagePlan page_plan(const Instruction&, const PlanInputs&) { return {}; }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat*) {
        auto a = decode_args<ReduceAddArgs>(ins);
        return {0, 4ull * a.n_rows * (a.n_slots + 2), uint64_t(a.n_rows) * a.n_slots};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (reduce_add_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-6};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
    [[noreturn]] static void fail_slots(const ReduceAddArgs& a);
};

}  // namespace mk

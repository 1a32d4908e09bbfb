// matvec_add: a block of output rows of a matrix-vector product added into the fp32 residual
// stream: x[rows] += W[rows, :] . in (the O-projection and the down-projection). With `store` set it
// writes x[rows] = W[rows, :] . in instead: a tensor-parallel rank's partial result, summed by reduce_add.
#pragma once
#include "instructions/common/page_plan.hpp"

namespace mk {

struct MatvecAddArgs {
    uint32_t weight;  // wo (d_model, q_dim) or w_down (d_model, d_ff)
    uint32_t row_begin;
    uint32_t n_rows;
    uint32_t cols;
    uint32_t in_off;  // (cols) fp32 input vector
    uint32_t x_off;   // (d_model) fp32 residual stream, or the rank's receive slot when store is set
    uint32_t store;   // 0: x[rows] += dot; 1: x[rows] = dot
};

struct MatvecAddOp {
    static constexpr Opcode opcode = Opcode::matvec_add;
    using Args = MatvecAddArgs;
    MK_HOST_DEVICE static Effects effects(const Instruction&) { return {}; }
    static std::vector<Access> accesses(const Instruction& ins, const ModelDims&) {
        auto a = decode_args<MatvecAddArgs>(ins);
        uint64_t x = a.x_off + 4ull * a.row_begin;
        return {{Space::arena, a.in_off, a.in_off + 4ull * a.cols, false},
                {Space::arena, x, x + 4ull * a.n_rows, true}};
    }
    static std::vector<uint32_t> weights(const Instruction& ins) {
        auto a = decode_args<MatvecAddArgs>(ins);
        return {a.weight};
    }
    static PagePlan page_plan(const Instruction& ins, const PlanInputs& in) {
        auto a = decode_args<MatvecAddArgs>(ins);
        return row_tiles_plan(in, a.weight, a.row_begin, a.n_rows);
    }
    static Cost cost(const Instruction& ins, const ModelDims&, const WeightFormat* w) {
        auto a = decode_args<MatvecAddArgs>(ins);
        return {uint64_t(a.n_rows) * w[a.weight].row_bytes, 4ull * (a.cols + 2 * a.n_rows), 2ull * a.n_rows * a.cols};
    }
    static void run_cpu(const Instruction& ins, OpContext& ctx);
    // The float64 reference and its generated cases (matvec_add_reference.cpp), checked by tests/instructions/.
    static constexpr Tolerance tolerance{1e-5};
    static std::vector<Expected> reference(const Instruction& ins, const OpBuffers& buffers);
    static std::vector<OpCase> cases(uint64_t seed);
    static std::string describe(const Instruction& ins);  // beside run_cpu: fmt stays out of device code
};

}  // namespace mk

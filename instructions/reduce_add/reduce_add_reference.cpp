// reduce_add's float64 reference and cases: every rank's partial added into the residual rows.
#include "instructions/reduce_add/reduce_add.hpp"

#include <fmt/format.h>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> ReduceAddOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<ReduceAddArgs>(ins);
    std::vector<double> x = ref_f32(b, a.x_off + 4ull * a.row_begin, a.n_rows);
    for (uint32_t k = 0; k < a.n_slots; ++k) {
        const std::vector<double> part = ref_f32(b, a.recv_off + uint64_t(k) * a.slot_bytes + 4ull * a.row_begin, a.n_rows);
        for (uint32_t r = 0; r < a.n_rows; ++r) x[r] += part[r];
    }
    return {ref_arena("x", a.x_off + 4ull * a.row_begin, std::move(x))};
}

std::vector<OpCase> ReduceAddOp::cases(uint64_t seed) {
    std::vector<OpCase> out;
    for (uint32_t n_slots : {1u, 2u, 4u}) {
        const ModelDims dims{.d_model = 96};
        CaseBuilder c(dims, seed++);
        const uint32_t x = c.activation(dims.d_model), recv = c.activation(uint64_t(n_slots) * dims.d_model);
        const ReduceAddArgs a{x, recv, 4 * dims.d_model, 24, 40, n_slots};
        out.push_back(c.finish(fmt::format("reduce_add {} ranks rows [24, 64)", n_slots), make_instruction<ReduceAddOp>(a)));
    }
    return out;
}

}  // namespace mk

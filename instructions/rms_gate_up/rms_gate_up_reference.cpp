// rms_gate_up's float64 reference and cases: silu(gate . norm(x)) * (up . norm(x)) for a row block.
#include "instructions/rms_gate_up/rms_gate_up.hpp"

#include <fmt/format.h>

#include <cmath>

#include "instructions/op_reference.hpp"
#include "models/quant.hpp"

namespace mk {

std::vector<Expected> RmsGateUpOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<RmsGateUpArgs>(ins);
    const std::vector<double> xn = ref_rms_norm(b, ref_f32(b, a.x_off, a.d_model), a.norm);
    std::vector<double> act(a.n_rows);
    for (uint32_t r = 0; r < a.n_rows; ++r) {
        const double gate = ref_dot(ref_row(b, a.gate, a.row_begin + r), xn);
        const double up = ref_dot(ref_row(b, a.up, a.row_begin + r), xn);
        act[r] = gate / (1.0 + std::exp(-gate)) * up;
    }
    return {ref_arena("act", a.act_off + 4ull * a.row_begin, std::move(act))};
}

std::vector<OpCase> RmsGateUpOp::cases(uint64_t seed) {
    struct Shape { uint32_t d_model, d_ff, row_begin, n_rows; };
    std::vector<OpCase> out;
    for (DType dtype : kMatrixFormats)
        for (const Shape& s : {Shape{256, 96, 32, 48}, Shape{512, 64, 0, 64}}) {
            CaseBuilder c(ModelDims{.d_model = s.d_model, .d_ff = s.d_ff}, seed++);
            const uint32_t gate = c.weight(dtype, s.d_ff, s.d_model, 0.5f), up = c.weight(dtype, s.d_ff, s.d_model, 0.5f);
            const uint32_t norm = c.weight(DType::F32, 1, s.d_model);
            const uint32_t x = c.activation(s.d_model), act = c.activation(s.d_ff);
            out.push_back(c.finish(fmt::format("rms_gate_up {} {}x{} rows [{}, {})", dtype_name(dtype), s.d_ff,
                                               s.d_model, s.row_begin, s.row_begin + s.n_rows),
                                   make_instruction<RmsGateUpOp>({0, s.row_begin, s.n_rows, s.d_model, x, act, gate, up, norm})));
        }
    return out;
}

}  // namespace mk

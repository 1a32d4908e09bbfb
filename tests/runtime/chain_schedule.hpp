// Hand-built schedules for the interpreter tests, made of real ops over seeded fp32 weights:
// a chain of matvec_add stages split into row blocks across SMs, with a float64 reference.
#pragma once
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "instructions/matvec_add/matvec_add.hpp"
#include "runtime/cpu/interpreter.hpp"
#include "scheduler/schedule.hpp"

namespace mk::test {

inline void add_wait(Instruction& ins, uint16_t counter, uint32_t target, Operand operand = Operand::input) {
    ins.waits[ins.n_waits++] = {counter, uint16_t(operand), target};
}

inline void add_signal(Instruction& ins, uint16_t counter, uint16_t delta = 1) {
    ins.signals[ins.n_signals++] = {counter, delta};
}

inline Instruction matvec_add(uint32_t weight, uint32_t row_begin, uint32_t n_rows, uint32_t cols, uint32_t in_off,
                              uint32_t x_off) {
    Instruction ins{};
    ins.opcode = uint16_t(Opcode::matvec_add);
    encode_args(MatvecAddArgs{weight, row_begin, n_rows, cols, in_off, x_off}, ins);
    return ins;
}

// Fills every instruction's n_pages and seq from its page plan, as the scheduler does.
inline void finish_schedule(Schedule& s) {
    const PlanInputs in = plan_inputs(s.target, s.weights.data());
    uint32_t seq = 0;
    for (auto& stream : s.streams)
        for (Instruction& ins : stream) {
            ins.n_pages = uint8_t(op_info(ins.opcode).page_plan(ins, in).n_pages);
            ins.seq = seq++;
        }
}

// Stage s computes buffer s+1 += W_s . buffer s, in row blocks; block j of stage s runs on SM
// (s * n_blocks + j) % n_sms and adds 1 to counter s; stage s > 0 waits for counter s - 1 to
// reach n_blocks (all of buffer s written). Buffer 0 is the host's input.
struct ChainSpec {
    uint32_t n_sms = 2, n_stages = 3, dim = 64, block_rows = 16;
    uint64_t page_bytes = 1024;  // 4 fp32 rows of 64: several tiles a block, pages reused within it
    uint32_t n_pages = 3;
    uint32_t seed = 1;
};

struct Chain {
    ChainSpec spec;
    Schedule schedule;
    std::vector<std::vector<float>> weight_data;  // by stage: (dim, dim) fp32
    std::vector<WeightRef> weights;
    std::vector<float> arena;                     // (n_stages + 1, dim) fp32 buffers
    std::vector<double> reference;                // the same buffers in float64

    uint32_t n_blocks() const { return spec.dim / spec.block_rows; }
    uint32_t offset(uint32_t buffer) const { return 4 * buffer * spec.dim; }
    ProgramMemory memory() { return {reinterpret_cast<uint8_t*>(arena.data()), weights.data()}; }

    void reference_step() {
        const uint32_t d = spec.dim;
        for (uint32_t s = 0; s < spec.n_stages; ++s)
            for (uint32_t r = 0; r < d; ++r) {
                double sum = 0.0;
                for (uint32_t k = 0; k < d; ++k) sum += double(weight_data[s][size_t(r) * d + k]) * reference[s * d + k];
                reference[(s + 1) * d + r] += sum;
            }
    }
    // max |arena - reference| / max |reference|
    double relative_error() const {
        double diff = 0.0, scale = 0.0;
        for (size_t i = 0; i < arena.size(); ++i) {
            diff = std::max(diff, std::abs(double(arena[i]) - reference[i]));
            scale = std::max(scale, std::abs(reference[i]));
        }
        return diff / scale;
    }
};

// Seeded, non-zero values in +-[0.1, 1] / sqrt(dim), so sums neither vanish nor blow up.
inline float seeded_value(std::mt19937& rng, uint32_t dim) {
    const float magnitude = 0.1f + 0.9f * float(rng() % 10000) / 10000.0f;
    return (rng() % 2 ? magnitude : -magnitude) / std::sqrt(float(dim));
}

inline Chain make_chain(const ChainSpec& spec) {
    Chain c;
    c.spec = spec;
    Schedule& s = c.schedule;
    s.target.n_sms = spec.n_sms;
    s.target.page_bytes = spec.page_bytes;
    s.target.n_pages = spec.n_pages;
    s.dims.d_model = spec.dim;
    s.streams.resize(spec.n_sms);
    s.arena_bytes = 4ull * (spec.n_stages + 1) * spec.dim;
    std::mt19937 rng(spec.seed);
    for (uint32_t b = 0; b <= spec.n_stages; ++b)
        s.buffers.push_back({"buf" + std::to_string(b), c.offset(b), 4ull * spec.dim, "(dim) fp32"});
    for (uint32_t st = 0; st < spec.n_stages; ++st) {
        c.weight_data.emplace_back(size_t(spec.dim) * spec.dim);
        for (float& v : c.weight_data.back()) v = seeded_value(rng, spec.dim);
        s.weights.push_back({uint32_t(DType::F32), spec.dim, spec.dim, 4ull * spec.dim});
        s.counters.push_back({"stage" + std::to_string(st), c.n_blocks()});
    }
    for (uint32_t st = 0; st < spec.n_stages; ++st) {
        const uint8_t* data = reinterpret_cast<const uint8_t*>(c.weight_data[st].data());
        c.weights.push_back({data, DType::F32, spec.dim, spec.dim, 4ull * spec.dim});
        for (uint32_t j = 0; j < c.n_blocks(); ++j) {
            Instruction ins = matvec_add(st, j * spec.block_rows, spec.block_rows, spec.dim, c.offset(st), c.offset(st + 1));
            if (st > 0) add_wait(ins, uint16_t(st - 1), c.n_blocks());
            add_signal(ins, uint16_t(st));
            s.streams[(st * c.n_blocks() + j) % spec.n_sms].push_back(ins);
        }
    }
    finish_schedule(s);
    c.arena.assign((spec.n_stages + 1) * size_t(spec.dim), 0.0f);
    for (uint32_t k = 0; k < spec.dim; ++k) c.arena[k] = seeded_value(rng, 1);
    c.reference.assign(c.arena.begin(), c.arena.end());
    return c;
}

}  // namespace mk::test

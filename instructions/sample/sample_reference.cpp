// sample's reference and cases, greedy: the index of the best block argmax, the lowest block winning ties.
// (The other sampling rules are checked against their Python reference in tests/runtime/sampling_oracle_test.)
#include "instructions/sample/sample.hpp"

#include <fmt/format.h>

#include <cstring>

#include "instructions/op_reference.hpp"

namespace mk {

std::vector<Expected> SampleOp::reference(const Instruction& ins, const OpBuffers& b) {
    const auto a = decode_args<SampleArgs>(ins);
    const std::vector<double> values = ref_f32(b, a.argmax_off, 2ull * a.n_blocks);  // (value, index bits) pairs
    uint32_t best = 0;
    for (uint32_t k = 1; k < a.n_blocks; ++k)
        if (values[2 * k] > values[2 * best]) best = k;
    int32_t token;
    std::memcpy(&token, &b.arena[a.argmax_off + 8ull * best + 4], 4);
    return {{"token", Space::arena, a.token_off, {double(token)}, Check::i32}};
}

std::vector<OpCase> SampleOp::cases(uint64_t seed) {
    std::vector<OpCase> out;
    for (uint32_t n_blocks : {1u, 7u, 33u}) {
        const ModelDims dims{.vocab = 64 * n_blocks};
        CaseBuilder c(dims, seed++);
        const uint32_t logits = c.activation(dims.vocab), argmax = c.activation(2ull * n_blocks), token = c.activation(1);
        std::vector<float> slots;
        for (uint32_t k = 0; k < n_blocks; ++k) {
            const int32_t index = int32_t(64 * k + c.below(64));
            float bits;
            std::memcpy(&bits, &index, 4);
            slots.push_back(k == 0 || k == 5 ? 5.0f : c.uniform(-4.0f, 4.0f));  // blocks 0 and 5 tie: 0 wins
            slots.push_back(bits);
        }
        c.fill(argmax, std::move(slots));
        out.push_back(c.finish(fmt::format("sample greedy {} blocks", n_blocks),
                               make_instruction<SampleOp>({logits, argmax, n_blocks, dims.vocab, token})));
    }
    return out;
}

}  // namespace mk

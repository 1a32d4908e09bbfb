// What the prefill ops share: activations of a chunk are (T, width) fp32 row-major, one row per token; a step
// runs the first n_tokens rows (the last chunk of a prompt may be shorter than the compiled T).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "instructions/op_context.hpp"
#include "models/tensor.hpp"

namespace mk {

// Columns [begin, begin + n) of each of the n_tok rows of a (n_tok, width) fp32 buffer at byte offset `off`.
inline void append_token_rows(std::vector<Access>& out, uint64_t off, uint32_t width, uint32_t begin, uint32_t n,
                              uint32_t n_tok, bool write) {
    if (begin == 0 && n == width) {  // whole rows: one range
        out.push_back({Space::arena, off, off + 4ull * n_tok * width, write});
        return;
    }
    for (uint32_t j = 0; j < n_tok; ++j) {
        const uint64_t row = off + 4ull * (uint64_t(j) * width + begin);
        out.push_back({Space::arena, row, row + 4ull * n, write});
    }
}

// The device code runs a weight matrix times a chunk's token columns on tensor cores (mma.sync m16n8k16,
// BF16/F16 in, fp32 accumulate) when the weights are BF16 or F16 and the chunk has at least 8 tokens (one
// n8 fragment); else on CUDA cores. The ops' cost() reports those flops apart, for the device cost model.
inline constexpr uint32_t kMmaMinTokens = 8;
inline uint64_t mma_eligible_flops(const WeightFormat& w, uint32_t n_tok, uint64_t flops) {
    const bool half = DType(w.dtype) == DType::BF16 || DType(w.dtype) == DType::F16;
    return half && n_tok >= kMmaMinTokens ? flops : 0;
}

// The tokens this step runs: the chunk's, at most the compiled n_tok.
inline uint32_t step_tokens(const StepState& step, uint32_t n_tok) {
    return uint32_t(std::clamp<int32_t>(step.n_tokens, 0, int32_t(n_tok)));
}

}  // namespace mk

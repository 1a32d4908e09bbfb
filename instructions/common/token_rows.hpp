// What the prefill ops share: activations of a chunk are (T, width) fp32 row-major, one row per token; a step
// runs the first n_tokens rows (the last chunk of a prompt may be shorter than the compiled T).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "instructions/op_context.hpp"

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

// The tokens this step runs: the chunk's, at most the compiled n_tok.
inline uint32_t step_tokens(const StepState& step, uint32_t n_tok) {
    return uint32_t(std::clamp<int32_t>(step.n_tokens, 0, int32_t(n_tok)));
}

}  // namespace mk

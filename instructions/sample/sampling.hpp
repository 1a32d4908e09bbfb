// The sampling rule every backend follows, so a fixed seed gives the same token everywhere:
// repetition penalty, temperature, top-k, softmax, min-p, top-p, then an inverse-CDF draw with
// Philox keyed by (seed, position).
#pragma once
#include <cstdint>

#include "instructions/op_context.hpp"

namespace mk {

// Index of the largest logit; the lowest index wins ties.
int32_t argmax(const float* logits, uint32_t n);

// Samples from logits (not modified) with `params`; history feeds the repetition penalty.
int32_t sample_token(const float* logits, uint32_t vocab, const SamplingParams& params, const int32_t* history,
                     int32_t n_history, int32_t position);

}  // namespace mk

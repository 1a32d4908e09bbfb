// sample on the CPU.
#include "instructions/sample/sample.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "instructions/sample/sampling.hpp"

namespace mk {

void SampleOp::run_cpu(const Instruction& ins, OpContext& ctx) {
    auto a = decode_args<SampleArgs>(ins);
    const SamplingParams& params = ctx.step->sampling;
    int32_t token;
    if (params.temperature <= 0.0f && params.repeat_penalty == 1.0f) {
        float best = 0.0f;
        token = -1;
        for (uint32_t b = 0; b < a.n_blocks; ++b) {  // block order: the lowest index wins ties
            float value;
            int32_t index;
            std::memcpy(&value, ctx.arena + a.argmax_off + 8ull * b, 4);
            std::memcpy(&index, ctx.arena + a.argmax_off + 8ull * b + 4, 4);
            if (token < 0 || value > best) {
                best = value;
                token = index;
            }
        }
    } else {
        token = sample_token(ctx.f32(a.logits_off), a.vocab, params, ctx.step->history, ctx.step->n_history,
                             ctx.step->pos);
    }
    std::memcpy(ctx.arena + a.token_off, &token, 4);
    // Every tensor-parallel rank samples the same token into the one StepState: an atomic store, not a race.
    std::atomic_ref<int32_t>(ctx.step->sampled_token).store(token, std::memory_order_relaxed);
}

std::string SampleOp::describe(const Instruction& ins) {
    auto a = decode_args<SampleArgs>(ins);
    return fmt::format("sample blocks {} vocab {}", a.n_blocks, a.vocab);
}

}  // namespace mk

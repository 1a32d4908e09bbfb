// The Program defaults every backend shares: truncating to nothing, and refusing KV-cache copies where
// a backend keeps no host copy of its cache, and prefill where it has no prefill schedule.
#include "runtime/program.hpp"

#include "models/error.hpp"

namespace mk {

uint64_t kv_floats(const Schedule& schedule, uint32_t n_past) {
    return uint64_t(schedule.dims.n_layers) * schedule.dims.kv_dim() * n_past;
}

void Program::truncate(uint32_t n_past) {
    if (n_past != 0) fail("the {} backend cannot keep part of a sequence (truncate to {})", backend_name(), n_past);
    reset();
}

void Program::read_kv(uint32_t, std::span<float>, std::span<float>) const {
    fail("the {} backend cannot save a session's KV cache yet", backend_name());
}

void Program::write_kv(uint32_t, std::span<const float>, std::span<const float>) {
    fail("the {} backend cannot load a session's KV cache yet", backend_name());
}

void Program::prefill(std::span<const int32_t>, int32_t) {
    fail("the {} backend has no multi-token prefill; run the prompt token by token", backend_name());
}

std::span<const float> Program::prefill_logits() const {
    fail("the {} backend keeps no logits of every prefill token (a prefill schedule with all logits)", backend_name());
}

}  // namespace mk

// Greedy progress over a schedule unrolled for two steps: every stream runs in order as far as its
// waits allow. Counters only grow, so running whatever is enabled reaches the same maximal state in
// any order; the verifier uses that to decide deadlock and happens-before exactly.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "scheduler/verify_internal.hpp"

namespace mk::verify_detail {

class Progress {
public:
    static constexpr uint32_t kSteps = 2;

    explicit Progress(const Context& ctx)
        : ctx_(ctx),
          value_(ctx.step_total.size()),
          parked_(ctx.step_total.size()),
          min_parked_(ctx.step_total.size(), UINT64_MAX),
          pc_(ctx.offset.size()),
          limit_(ctx.offset.size()),
          is_parked_(ctx.offset.size()),
          queued_(ctx.offset.size()) {}

    uint32_t length(uint32_t sm) const { return kSteps * ctx_.stream_size(sm); }
    // Window node of position p (step p / size, index p % size) of a stream: step * n + flat index.
    uint32_t node(uint32_t sm, uint32_t p) const {
        const uint32_t size = ctx_.stream_size(sm);
        return (p / size) * ctx_.n + ctx_.offset[sm] + p % size;
    }
    uint32_t pc(uint32_t sm) const { return pc_[sm]; }
    uint64_t value(uint32_t counter) const { return value_[counter]; }
    bool parked(uint32_t sm) const { return is_parked_[sm]; }

    // Back to the start of step 0 with each stream allowed to run its first limit(sm) positions.
    template <typename Limit>
    void reset(Limit&& limit) {
        std::fill(value_.begin(), value_.end(), 0);
        for (auto& list : parked_) list.clear();
        std::fill(min_parked_.begin(), min_parked_.end(), UINT64_MAX);
        for (uint32_t sm = 0; sm < pc_.size(); ++sm) {
            pc_[sm] = 0;
            is_parked_[sm] = false;
            queued_[sm] = false;
            limit_[sm] = limit(sm);
            enqueue(sm);
        }
    }
    // Lets `sm` run up to position `limit` (exclusive) from the next run() on.
    void raise_limit(uint32_t sm, uint32_t limit) {
        limit_[sm] = limit;
        if (!is_parked_[sm]) enqueue(sm);
    }
    // Runs to the maximal state; on_enabled(sm, position, node) for every instruction as it starts.
    template <typename OnEnabled>
    void run(OnEnabled&& on_enabled) {
        while (!ready_.empty()) {
            const uint32_t sm = ready_.back();
            ready_.pop_back();
            queued_[sm] = false;
            advance(sm, on_enabled);
        }
    }
    // The first unmet wait of the instruction at `sm`'s pc as (counter, absolute target); sm must be parked.
    std::pair<uint32_t, uint64_t> blocking_wait(uint32_t sm) const {
        const uint32_t size = ctx_.stream_size(sm), step = pc_[sm] / size, flat = ctx_.offset[sm] + pc_[sm] % size;
        for (const Wait& w : ctx_.waits[flat]) {
            const uint64_t target = step * ctx_.step_total[w.counter] + w.target;
            if (value_[w.counter] < target) return {w.counter, target};
        }
        return {UINT32_MAX, 0};
    }

private:
    void enqueue(uint32_t sm) {
        if (queued_[sm] || pc_[sm] >= limit_[sm]) return;
        queued_[sm] = true;
        ready_.push_back(sm);
    }

    template <typename OnEnabled>
    void advance(uint32_t sm, OnEnabled& on_enabled) {
        const uint32_t size = ctx_.stream_size(sm);
        while (pc_[sm] < limit_[sm]) {
            const uint32_t step = pc_[sm] / size, flat = ctx_.offset[sm] + pc_[sm] % size;
            for (const Wait& w : ctx_.waits[flat]) {
                const uint64_t target = step * ctx_.step_total[w.counter] + w.target;
                if (value_[w.counter] < target) {
                    is_parked_[sm] = true;
                    parked_[w.counter].push_back({target, sm});
                    min_parked_[w.counter] = std::min(min_parked_[w.counter], target);
                    return;
                }
            }
            on_enabled(sm, pc_[sm], step * ctx_.n + flat);
            const Instruction& ins = *ctx_.ins[flat];
            for (uint32_t k = 0; k < ins.n_signals; ++k) {
                const uint32_t c = ins.signals[k].counter;
                value_[c] += ins.signals[k].delta;
                if (value_[c] >= min_parked_[c]) wake(c);
            }
            ++pc_[sm];
        }
    }

    // Wakes every stream parked on `c` whose target is met. Waiters on one counter mostly share a
    // target (a group's total), so one scan wakes them all; min_parked_ skips the other signals.
    void wake(uint32_t c) {
        auto& list = parked_[c];
        uint64_t min = UINT64_MAX;
        size_t kept = 0;
        for (const Parked& p : list) {
            if (p.first <= value_[c]) {
                is_parked_[p.second] = false;
                enqueue(p.second);
            } else {
                min = std::min(min, p.first);
                list[kept++] = p;
            }
        }
        list.resize(kept);
        min_parked_[c] = min;
    }

    using Parked = std::pair<uint64_t, uint32_t>;  // (absolute target, stream)
    const Context& ctx_;
    std::vector<uint64_t> value_;
    std::vector<std::vector<Parked>> parked_;
    std::vector<uint64_t> min_parked_;
    std::vector<uint32_t> pc_, limit_;
    std::vector<uint8_t> is_parked_, queued_;
    std::vector<uint32_t> ready_;
};

}  // namespace mk::verify_detail

// A vector-clock race detector for the CPU interpreter: every arena word and KV-cache entry an op
// touches must be ordered, through the schedule's counters, after the accesses it conflicts with.
// Because it reasons about happens-before rather than timing, a missing wait is caught whatever
// order the threads happened to run in.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/prepare.hpp"

namespace mk {

class RaceDetector {
public:
    RaceDetector(const Schedule& schedule, const PreparedSchedule& prepared);

    // A step starts: run_step is a barrier, so everything earlier happened-before everything in it.
    void begin_step(uint64_t epoch, int32_t pos);
    // Instruction `index` of `sm` is about to run with all its waits met: joins the clocks of the
    // signals its waits needed, then checks its accesses. Throws mk::Error naming the other side.
    void before_instruction(uint32_t sm, uint32_t index, const PreparedInstruction& p);
    // Adds `delta` to `value` and records the signaller's clock as reaching the new value.
    uint64_t signal(uint32_t sm, uint16_t counter, uint16_t delta, std::atomic<uint64_t>& value);

private:
    static constexpr uint32_t kNone = 0xffffffffu;
    struct Stamp {
        uint32_t sm = kNone, index = 0, clock = 0;  // who accessed, at which point of its own clock
    };
    struct Cell {
        uint32_t gen = 0;          // the step it was last touched in; older contents are void
        Stamp write;
        std::vector<Stamp> reads;  // since the write, at most one (the latest) per SM
    };
    // The counter's signals this step: the value each one reached and the join of the clocks of it
    // and every signal before it, (n_signals, n_sms).
    struct History {
        std::vector<uint64_t> values;
        std::vector<uint32_t> clocks;
    };

    void check(Cell& cell, const Stamp& me, const uint32_t* clock, bool write, const Access& a, uint64_t unit);
    [[noreturn]] void report(const Stamp& other, bool write, bool other_wrote, const Access& a, uint64_t unit) const;

    const Schedule& schedule_;
    const PreparedSchedule& prepared_;
    uint32_t n_sms_;
    std::mutex mu_;
    std::vector<uint32_t> clocks_;   // (n_sms, n_sms): row s is SM s's vector clock
    std::vector<History> history_;   // by counter
    std::vector<uint64_t> base_;     // by counter: its value when the step started
    std::vector<Cell> arena_;        // by 4-byte arena word
    std::vector<Cell> kv_[2];        // K and V: by cache slot (layer * kv_dim + row), at the step's position
    uint32_t gen_ = 0;
    int32_t pos_ = 0;
    uint64_t epoch_ = 0;
};

}  // namespace mk

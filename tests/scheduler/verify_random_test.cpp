// Property test: on hundreds of small random schedules the verifier's verdicts (race, deadlock)
// equal those of an exhaustive search over every interleaving, and whatever it accepts stays
// race-free over three steps (the fence check's promise that two unrolled steps are enough).
#include <catch2/catch.hpp>

#include <random>

#include "instructions/registry.hpp"
#include "scheduler/verify.hpp"
#include "tests/scheduler/exhaustive.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;

namespace {

// Rough overlap (positions ignored) for choosing which waits to add; the verdicts never use it.
bool may_conflict(const Instruction& a, const Instruction& b, const ModelDims& dims) {
    for (const Access& x : op_info(a.opcode).accesses(a, dims))
        for (const Access& y : op_info(b.opcode).accesses(b, dims))
            if (x.space == y.space && x.begin < y.end && y.begin < x.end && (x.write || y.write)) return true;
    return false;
}

Instruction random_op(std::mt19937& rng) {
    auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
    switch (pick(0, 9)) {
        case 0:
        case 1: return kv_write(pick(0, 1), pick(0, 1), pick(0, 8), pick(1, 2));
        case 2:
        case 3: {
            const uint32_t head = pick(0, 1);
            return attn_read(head, pick(std::max(1u, head), 9), pick(head, 9), pick(2 * head, 8));
        }
        default: return matvec(pick(0, 8), pick(0, 3), pick(0, 8), pick(1, 3));
    }
}

// Instructions in sequential order (seq = position) dealt to streams, then synchronised: mostly
// waits derived from conflicts (some dropped, some targets off), sometimes entirely random waits,
// sometimes two instructions of a stream swapped.
Schedule random_schedule(std::mt19937& rng) {
    auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
    auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
    // Modes: 0 random waits; 1 derived; 2 derived, some dropped; 3 derived, some targets random.
    const uint32_t mode = pick(0, 3), n_streams = pick(2, 4), n = pick(6, 14);
    const uint32_t n_counters = mode == 0 ? pick(1, 3) : pick(2, 6);
    Schedule s = tiny_schedule(n_streams, n_counters);
    std::vector<Instruction> ins(n);
    std::vector<uint32_t> stream(n);
    for (uint32_t k = 0; k < n; ++k) {
        ins[k] = random_op(rng);
        ins[k].seq = k;
        stream[k] = pick(0, n_streams - 1);
        if (mode != 0 || chance(0.7))
            signal(ins[k], uint16_t(mode == 0 ? pick(0, n_counters - 1) : k % n_counters), uint16_t(pick(1, 2)));
        if (chance(0.1)) signal(ins[k], uint16_t(pick(0, n_counters - 1)), 1);
    }
    std::vector<uint32_t> total(n_counters, 0), before(n * n_counters, 0);  // signals up to and including k
    for (uint32_t k = 0; k < n; ++k) {
        for (uint32_t i = 0; i < ins[k].n_signals; ++i) total[ins[k].signals[i].counter] += ins[k].signals[i].delta;
        for (uint32_t c = 0; c < n_counters; ++c) before[k * n_counters + c] = total[c];
    }
    for (uint32_t y = 0; y < n; ++y) {
        if (mode == 0) {  // random waits
            for (uint32_t w = pick(0, 2); w > 0; --w) {
                const uint16_t c = uint16_t(pick(0, n_counters - 1));
                wait(ins[y], c, pick(0, total[c]));
            }
            continue;
        }
        for (uint32_t x = 0; x < n && ins[y].n_waits < kMaxWaits; ++x) {
            if (x == y || stream[x] == stream[y] || !ins[x].n_signals || !may_conflict(ins[x], ins[y], s.dims))
                continue;
            if (chance(mode == 1 ? 0.0 : mode == 2 ? 0.2 : 0.05)) continue;
            const uint16_t c = ins[x].signals[0].counter;
            // Earlier in the step: wait for the signals up to x; later: x of the previous step (target 0).
            uint32_t target = x < y ? before[x * n_counters + c] : 0;
            if (mode == 3 && chance(0.3)) target = pick(0, total[c]);
            wait(ins[y], c, target, x < y ? Operand::input : Operand::output);
        }
    }
    for (uint32_t k = 0; k < n; ++k) s.streams[stream[k]].push_back(ins[k]);
    if (chance(0.05)) {
        auto& st = s.streams[pick(0, n_streams - 1)];
        if (st.size() >= 2) {
            const uint32_t i = pick(0, uint32_t(st.size()) - 2);
            std::swap(st[i], st[i + 1]);
        }
    }
    finish(s, false);
    return s;
}

}  // namespace

TEST_CASE("verifier verdicts equal an exhaustive search on random schedules", "[cpu]") {
    std::mt19937 rng(20240611);
    const int n_cases = 600;
    int n_ok = 0, n_race = 0, n_deadlock = 0, n_fence = 0, n_fence_only = 0, n_fence_only_race3 = 0;
    size_t max_states = 0;
    for (int i = 0; i < n_cases; ++i) {
        const Schedule s = random_schedule(rng);
        const VerifyReport r = verify(s);
        INFO("case " << i << ": " << r.summary());
        REQUIRE(r.count(VerifyCheck::structure) + r.count(VerifyCheck::counters) + r.count(VerifyCheck::pages) == 0);
        const Exploration one = explore(s, 1), two = explore(s, 2);
        INFO("exhaustive: race " << two.race << " (" << two.example << "), deadlock " << one.deadlock << "/"
                                 << two.deadlock);
        max_states = std::max(max_states, two.n_states);
        CHECK((r.count(VerifyCheck::deadlock) > 0) == (one.deadlock || two.deadlock));
        CHECK((r.count(VerifyCheck::race) > 0) == two.race);
        n_race += two.race;
        n_deadlock += one.deadlock || two.deadlock;
        n_fence += r.count(VerifyCheck::fence) > 0;
        if (r.ok) {
            ++n_ok;
            const Exploration three = explore(s, 3);
            INFO("three steps: " << three.example);
            CHECK_FALSE(three.race);
            CHECK_FALSE(three.deadlock);
        } else if (r.count(VerifyCheck::fence) && !two.race && !r.count(VerifyCheck::deadlock)) {
            ++n_fence_only;
            n_fence_only_race3 += explore(s, 3).race;
        }
    }
    WARN(n_cases << " random schedules: " << n_ok << " verified, " << n_race << " racy, " << n_deadlock
                 << " deadlocked, " << n_fence << " with fence errors (" << n_fence_only << " with nothing else, "
                 << n_fence_only_race3 << " of which race within 3 steps); largest search " << max_states << " states");
    // The generator must exercise every verdict, or the agreement means little.
    CHECK(n_ok >= n_cases / 10);
    CHECK(n_race >= n_cases / 10);
    CHECK(n_deadlock >= n_cases / 20);
    CHECK(n_fence >= 10);
}

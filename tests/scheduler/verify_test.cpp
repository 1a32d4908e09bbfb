// Verifier tests on hand-built schedules: a correct pipeline passes; each mutation (a dropped wait,
// a reordered stream, over-committed pages, wrong counter totals, bad structure) is rejected by name.
#include <catch2/catch.hpp>

#include "scheduler/verify.hpp"
#include "tests/scheduler/exhaustive.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;

namespace {

bool mentions(const VerifyReport& r, const std::string& text) {
    for (const std::string& e : r.errors)
        if (e.find(text) != std::string::npos) return true;
    return false;
}

// SM 0 writes words [0, 4) and signals c0; SM 1 waits for it, reads them and writes [8, 12), then
// signals c1, which SM 0 waits for (target 0: the previous step's) before overwriting [0, 4).
Schedule pipeline() {
    Schedule s = tiny_schedule(2, 2);
    Instruction a = matvec(16, 4, 0, 4);
    wait(a, 1, 0, Operand::output);
    signal(a, 0);
    Instruction b = matvec(0, 4, 8, 4);
    wait(b, 0, 1);
    signal(b, 1);
    s.streams[0] = {a};
    s.streams[1] = {b};
    finish(s);
    return s;
}

}  // namespace

TEST_CASE("a two-SM pipeline with its waits verifies", "[cpu]") {
    const VerifyReport r = verify(pipeline());
    INFO(r.summary());
    CHECK(r.ok);
    CHECK(r.stats.n_instructions == 2);
    CHECK(r.stats.n_conflicts > 0);
    CHECK(r.summary().rfind("ok:", 0) == 0);
}

TEST_CASE("a dropped wait is a race naming both instructions and the missing edge", "[cpu]") {
    Schedule s = pipeline();
    SECTION("read-after-write in the step") {
        const VerifyReport r = verify(s, {.ignore_waits = {{1, 0, 0}}});
        INFO(r.summary());
        CHECK(r.count(VerifyCheck::race) >= 1);
        CHECK(mentions(r, "race: sm 1 #0 (matvec_add"));
        CHECK(mentions(r, "reads arena [0, 16)"));
        CHECK(mentions(r, "missing edge sm 0 #0 -> sm 1 #0)"));
        s.streams[1][0].n_waits = 0;  // the same through the schedule itself, and the oracle agrees
        CHECK(explore(s, 2).race);
    }
    SECTION("write-after-read across steps") {
        const VerifyReport r = verify(s, {.ignore_waits = {{0, 0, 0}}});
        INFO(r.summary());
        CHECK(r.count(VerifyCheck::race) == 1);
        CHECK(
            mentions(r, "race: sm 0 #0 (matvec_add w=7 rows [0, 4) k=4) writes arena [0, 16) in step e+1 but sm 1 #0"));
        CHECK(mentions(r, "missing edge sm 1 #0 -> sm 0 #0 of the next step"));
    }
}

TEST_CASE("swapping two instructions of a stream into a wait cycle is a deadlock", "[cpu]") {
    // SM 0: signal c0 then wait c1; SM 1: wait c0 then signal c1. Swapping SM 0's pair closes a cycle.
    Schedule s = tiny_schedule(2, 2);
    Instruction give = matvec(0, 1, 0, 1), take = matvec(8, 1, 8, 1), mid0 = matvec(16, 1, 16, 1),
                mid1 = matvec(24, 1, 24, 1);
    signal(give, 0);
    wait(take, 1, 1);
    wait(mid1, 0, 1);
    signal(mid1, 1);
    s.streams[0] = {give, take};
    s.streams[1] = {mid1, mid0};
    finish(s);
    CHECK(verify(s).ok);
    std::swap(s.streams[0][0], s.streams[0][1]);
    const VerifyReport r = verify(s);
    INFO(r.summary());
    CHECK(r.count(VerifyCheck::deadlock) == 3);
    CHECK(mentions(r,
                   "deadlock: sm 0 #0 (matvec_add w=7 rows [8, 9) k=1) waits counter 1 (c1) >= 1 but at most 0 can be "
                   "signalled before it (still to signal it: sm 1 #0, itself stuck at sm 1 #0)"));
    CHECK(mentions(r, "deadlock: cycle sm 0 #0 -> sm 1 #0 -> sm 0 #0"));
    CHECK(explore(s, 1).deadlock);
}

TEST_CASE("a wait on a signal later in the same stream, or beyond the step total, is a deadlock", "[cpu]") {
    Schedule s = tiny_schedule(1, 1);
    Instruction a = matvec(0, 1, 0, 1), b = matvec(4, 1, 4, 1);
    wait(a, 0, 1);
    signal(b, 0);
    s.streams[0] = {a, b};
    finish(s);
    VerifyReport r = verify(s);
    CHECK(mentions(r, "sm 0 #1 after this wait in its own stream"));
    CHECK(mentions(r, "deadlock: cycle sm 0 #0 -> sm 0 #0"));

    s.streams[0][0].waits[0].target = 2;  // only 1 a step
    std::swap(s.streams[0][0], s.streams[0][1]);
    r = verify(s);
    CHECK(mentions(
        r, "waits counter 0 (c0) >= 2 but at most 1 can be signalled before it (the counter receives only 1 a step)"));
}

TEST_CASE("over-committed or misdeclared pages are rejected", "[cpu]") {
    Schedule s = pipeline();
    s.target.n_pages = 2;  // matvec of 4 rows planned with 4 pages
    VerifyReport r = verify(s);
    CHECK(mentions(r, "pages: sm 0 #0 (matvec_add w=7 rows [0, 4) k=4) needs 4 pages, target has 2"));
    CHECK(mentions(r, "declares 4 pages but its page plan uses 2"));

    s = pipeline();
    s.streams[1][0].n_pages = 3;
    r = verify(s);
    CHECK(r.count(VerifyCheck::pages) == 1);
    CHECK(mentions(r, "pages: sm 1 #0 (matvec_add w=7 rows [8, 12) k=4) declares 3 pages but its page plan uses 4"));
}

TEST_CASE("counter totals and bounds are checked", "[cpu]") {
    Schedule s = pipeline();
    s.counters[1].step_total = 2;
    VerifyReport r = verify(s);
    CHECK(mentions(r, "counters: counter 1 (c1) declares step_total 2 but its signals add 1 per step"));
    CHECK(r.count(VerifyCheck::race) == 0);  // ordering is not judged on inconsistent totals

    s = pipeline();
    s.streams[0][0].signals[0].delta = 7;
    finish(s);
    r = verify(s, {.counter_bits = 32, .max_steps = uint64_t(1) << 30});
    CHECK(mentions(r, "counters: counter 0 (c0) grows by 7 a step; 1073741824 steps overflow a 32-bit counter"));
    r = verify(s);
    CHECK(r.ok);
    CHECK(r.stats.max_step_total == 7);
    CHECK(r.stats.u32_wrap_steps == (uint64_t(1) << 32) / 7);
}

TEST_CASE("malformed structure is rejected before anything indexes with it", "[cpu]") {
    Schedule s = pipeline();
    s.streams[0][0].opcode = 999;
    CHECK(mentions(verify(s), "structure: sm 0 #0 has invalid opcode 999"));

    s = pipeline();
    s.streams[1][0].waits[0].counter = 9;
    CHECK(mentions(verify(s), "structure: sm 1 #0 wait 0 names counter 9 of 2"));

    s = pipeline();
    s.streams[1][0].seq = 0;
    CHECK(mentions(verify(s), "structure: sm 1 #0 and sm 0 #0 share seq 0"));

    s = pipeline();
    s.streams[0][0].n_waits = 5;
    CHECK(mentions(verify(s), "structure: sm 0 #0 has 5 waits (max 4)"));

    s = pipeline();
    s.streams.push_back({});
    CHECK(mentions(verify(s), "structure: 3 streams for 1 rank(s) of 2 SMs"));

    s = pipeline();
    CHECK(
        mentions(verify(s, {.ignore_waits = {{0, 0, 3}}}), "ignore_waits names sm 0 #0 wait 3, which does not exist"));

    s = pipeline();
    s.streams[0][0].opcode = 999;
    s.streams[1][0].opcode = 999;
    const VerifyReport first = verify(s, {.stop_at_first_error = true});
    CHECK(first.errors.size() == 1);
    CHECK_THROWS_WITH(verify_or_throw(s, "bad.mks"),
                      Catch::Contains("bad.mks: schedule failed verification: 2 errors"));
}

TEST_CASE("KV rows: a write at pos must precede reads up to pos, not the previous step's", "[cpu]") {
    // SM 0 appends K and V at pos, SM 1 attends over rows 0..pos. The reader of step e does not
    // conflict with the writer of step e+1 (a new row), so no write-after-read wait is needed.
    Schedule s = tiny_schedule(2, 1);
    Instruction k = kv_write(false, 0, 0, 4), v = kv_write(true, 0, 0, 4), a = attn_read(0, 8, 12, 16);
    signal(v, 0);
    wait(a, 0, 1, Operand::kv_cache);
    s.streams[0] = {k, v};
    s.streams[1] = {a};
    finish(s);
    VerifyReport r = verify(s);
    INFO(r.summary());
    CHECK(r.ok);
    CHECK_FALSE(explore(s, 3).race);

    s.streams[1][0].n_waits = 0;
    r = verify(s);
    INFO(r.summary());
    CHECK(r.count(VerifyCheck::race) == 4);
    CHECK(mentions(
        r, "race: sm 1 #0 (attn_partial L0 kv0 part 0/1) reads k_cache slots [0, 1) row pos of step e but sm 0 #0"));
    CHECK(mentions(r, "reads v_cache slots [0, 1) row pos of step e but sm 0 #1"));
    CHECK(mentions(r, "reads k_cache slots [0, 1) row pos of step e in step e+1 but sm 0 #0"));
}

TEST_CASE("a stream that can run a step ahead and meet a wait early is caught by the fence", "[cpu]") {
    // c0 gets 1 a step from SM 0 (which waits for nothing) and 2 from SM 1 after it writes words
    // [0, 4); SM 2 waits for all 3 before reading them. Two steps of SM 0 give 2 < 3, but three give
    // 3: only a longer run shows the race, and the fence check flags it from two steps.
    Schedule s = tiny_schedule(3, 2);
    Instruction free_runner = matvec(32, 1, 32, 1), writer = matvec(40, 1, 0, 4), reader = matvec(0, 4, 16, 1);
    signal(free_runner, 0, 1);
    wait(writer, 1, 0, Operand::output);
    signal(writer, 0, 2);
    wait(reader, 0, 3);
    signal(reader, 1);
    s.streams = {{free_runner}, {writer}, {reader}};
    finish(s);
    const VerifyReport r = verify(s);
    INFO(r.summary());
    CHECK(r.count(VerifyCheck::race) == 0);
    CHECK(r.count(VerifyCheck::deadlock) == 0);
    CHECK_FALSE(explore(s, 2).race);
    CHECK(r.count(VerifyCheck::fence) == 1);
    CHECK(mentions(
        r, "fence: sm 2 #0 (matvec_add w=7 rows [16, 17) k=4) waits counter 0 (c0) >= 3 in step e, but sm 0 #0"));
    CHECK(mentions(r, "before sm 1 #0 (matvec_add w=7 rows [0, 4) k=1) signals it in step e"));
    CHECK(mentions(r, "(missing edge sm 2 #0 -> sm 0 #0 of the next step, or sm 1 #0 -> the same)"));
    CHECK(explore(s, 3).race);

    // With SM 0 as the counter's only signaller, running ahead cannot skip anybody's signal.
    s.streams[1][0].n_signals = 0;
    s.streams[2][0].waits[0].target = 1;
    finish(s);
    const VerifyReport single = verify(s);
    INFO(single.summary());
    CHECK(single.count(VerifyCheck::fence) == 0);
}

// The CPU interpreter against hand-built schedules: results, determinism across thread counts,
// epoch-relative counters over several steps, stall reports, op errors and schedule validation.
#include "runtime/cpu/interpreter.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>

#include "instructions/embed/embed.hpp"
#include "models/error.hpp"
#include "tests/runtime/chain_schedule.hpp"

using namespace mk;
using namespace mk::test;
using Catch::Matchers::Contains;

namespace {

// Runs `n_steps` steps and returns the arena's bytes after them.
std::vector<float> run_chain(Chain c, InterpreterOptions options, uint32_t n_steps) {
    Interpreter interp(c.schedule, c.memory(), options);
    for (uint32_t e = 0; e < n_steps; ++e) {
        StepState step;
        step.epoch = e;
        interp.run_step(step);
    }
    return c.arena;
}

std::string error_of(const std::function<void()>& body) {
    try {
        body();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// The chain with an embed in front: sm 0 first writes the step token's row of a (5, dim) table
// into buf0, which the chain's first stage waits for.
struct EmbedChain {
    Chain chain;
    std::vector<float> table;
};

EmbedChain make_embed_chain(uint32_t n_stages) {
    ChainSpec spec;
    spec.n_stages = n_stages;
    EmbedChain e{make_chain(spec), {}};
    Chain& c = e.chain;
    Schedule& s = c.schedule;
    const uint32_t vocab = 5;
    e.table.resize(size_t(vocab) * spec.dim);
    std::mt19937 rng(7);
    for (float& v : e.table) v = seeded_value(rng, 1);
    const uint32_t embedding = uint32_t(s.weights.size());
    s.weights.push_back({uint32_t(DType::F32), vocab, spec.dim, 4ull * spec.dim});
    c.weights.push_back({reinterpret_cast<const uint8_t*>(e.table.data()), DType::F32, vocab, spec.dim, 4ull * spec.dim});
    Instruction embed{};
    embed.opcode = uint16_t(Opcode::embed);
    encode_args(EmbedArgs{embedding, c.offset(0), spec.dim}, embed);
    const uint16_t embedded = uint16_t(s.counters.size());
    s.counters.push_back({"embedded", 1});
    add_signal(embed, embedded);
    s.streams[0].insert(s.streams[0].begin(), embed);
    for (auto& stream : s.streams)
        for (Instruction& ins : stream)
            if (ins.opcode == uint16_t(Opcode::matvec_add) && ins.n_waits == 0) add_wait(ins, embedded, 1);
    finish_schedule(s);
    return e;
}

}  // namespace

TEST_CASE("interpreter runs a multi-SM chain and matches a float64 reference", "[cpu]") {
    const uint32_t n_threads = GENERATE(1u, 2u, 4u);
    ChainSpec spec;
    spec.n_sms = 3;
    spec.n_stages = 4;
    Chain c = make_chain(spec);
    Interpreter interp(c.schedule, c.memory(), {n_threads});
    CHECK(interp.n_threads() == n_threads);
    for (uint32_t e = 0; e < 3; ++e) {
        StepState step;
        step.epoch = e;
        interp.run_step(step);
        c.reference_step();
        CHECK(c.relative_error() < 1e-5);
        for (uint32_t k = 0; k < spec.n_stages; ++k) CHECK(interp.counter_value(k) == (e + 1) * c.n_blocks());
    }
    CHECK(c.arena[c.offset(spec.n_stages) / 4] != 0.0f);
}

TEST_CASE("interpreter results are bit-identical whatever the thread count and mode", "[cpu]") {
    ChainSpec spec;
    spec.n_sms = 8;
    spec.n_stages = 5;
    spec.dim = 128;
    spec.block_rows = 8;
    const Chain c = make_chain(spec);
    const std::vector<float> expected = run_chain(c, {1}, 3);
    for (uint32_t threads : {1u, 2u, 4u}) {
        for (int mode = 0; mode < 3; ++mode) {
            InterpreterOptions options{threads};
            options.check_pages = mode == 1;
            options.detect_races = mode == 2;
            const std::vector<float> got = run_chain(c, options, 3);
            INFO("threads " << threads << " mode " << mode);
            CHECK(std::memcmp(got.data(), expected.data(), expected.size() * 4) == 0);
        }
    }
}

TEST_CASE("interpreter runs more SMs than blocks, and SMs with empty streams", "[cpu]") {
    ChainSpec spec;
    spec.n_sms = 9;
    spec.n_stages = 1;
    spec.dim = 32;
    Chain c = make_chain(spec);  // 2 blocks on 9 SMs
    REQUIRE(c.schedule.streams[5].empty());
    Interpreter interp(c.schedule, c.memory(), {3});
    StepState step;
    interp.run_step(step);
    c.reference_step();
    CHECK(c.relative_error() < 1e-5);
}

TEST_CASE("interpreter counters are epoch-relative and never reset", "[cpu]") {
    Chain c = make_chain({});
    Interpreter interp(c.schedule, c.memory(), {2});
    StepState step;
    for (uint32_t e = 0; e < 4; ++e) {
        step.epoch = e;
        interp.run_step(step);
        c.reference_step();
    }
    CHECK(interp.counter_value(0) == 4 * c.n_blocks());
    CHECK(c.relative_error() < 1e-5);

    SECTION("a skipped or repeated epoch is refused") {
        step.epoch = 3;
        CHECK_THAT(error_of([&] { interp.run_step(step); }),
                   Contains("counter 0 'stage0' is at 16, but step 3 starts it at 12"));
        step.epoch = 5;
        CHECK_THROWS_AS(interp.run_step(step), Error);
    }
    SECTION("reset starts a new generation") {
        interp.reset();
        CHECK(interp.counter_value(1) == 0);
        step.epoch = 0;
        interp.run_step(step);
        CHECK(interp.counter_value(1) == c.n_blocks());
    }
}

TEST_CASE("interpreter reports a stall naming every blocked stream", "[cpu]") {
    const uint32_t n_threads = GENERATE(1u, 2u, 4u);
    const auto start = std::chrono::steady_clock::now();

    SECTION("an unmeetable wait") {
        ChainSpec spec;
        spec.n_stages = 2;
        Chain c = make_chain(spec);  // 4 blocks a stage alternating sm 0, 1: sm 1 #2 is stage 1's block 1
        c.schedule.streams[1][2].waits[0].target = c.n_blocks() + 1;
        Interpreter interp(c.schedule, c.memory(), {n_threads});
        interp.reset(1);  // step 1: the absolute target is 4 + 5
        StepState step;
        step.epoch = 1;
        const std::string report = error_of([&] { interp.run_step(step); });
        INFO(report);
        CHECK_THAT(report, Contains("stall in step 1: 1 of 2 streams blocked"));
        CHECK_THAT(report, Contains("sm 1 #2 (matvec_add w=1 rows [16, 32) k=64): waits for counter 0 'stage0' = 8 "
                                    "to reach 9 (step target 5, step_total 4)"));
    }
    SECTION("a cycle across SMs") {
        Chain c = make_chain({});
        Schedule& s = c.schedule;
        s.counters.push_back({"ping", 1});
        s.counters.push_back({"pong", 1});
        add_wait(s.streams[0][0], 4, 1);  // sm 0 waits for pong before it pings
        add_signal(s.streams[0][1], 3);
        add_wait(s.streams[1][0], 3, 1);  // sm 1 waits for ping before it pongs
        add_signal(s.streams[1][1], 4);
        Interpreter interp(s, c.memory(), {n_threads});
        StepState step;
        const std::string report = error_of([&] { interp.run_step(step); });
        INFO(report);
        CHECK_THAT(report, Contains("2 of 2 streams blocked"));
        CHECK_THAT(report, Contains("sm 0 #0 (matvec_add w=0 rows [0, 16) k=64): waits for counter 4 'pong' = 0 to reach 1"));
        CHECK_THAT(report, Contains("sm 1 #0 (matvec_add w=0 rows [16, 32) k=64): waits for counter 3 'ping' = 0 to reach 1"));
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("interpreter stops the step on an op error and names the instruction", "[cpu]") {
    const uint32_t n_threads = GENERATE(1u, 3u);
    EmbedChain e = make_embed_chain(2);
    Chain& c = e.chain;
    const ChainSpec& spec = c.spec;
    const std::vector<float>& table = e.table;
    const Schedule& s = c.schedule;
    Interpreter interp(s, c.memory(), {n_threads});
    StepState step;
    step.token = 9;
    const std::string message = error_of([&] { interp.run_step(step); });
    CHECK_THAT(message, Contains("sm 0 #0 (embed w=2 x@0 d=64): embed: token id 9 outside the vocabulary (5)"));
    CHECK(error_of([&] { interp.run_step(step); }) ==
          "interpreter: the previous step failed; reset() before running another");

    interp.reset();
    step.token = 3;
    interp.run_step(step);
    for (uint32_t k = 0; k < spec.dim; ++k) c.reference[k] = table[3 * spec.dim + k];
    c.reference_step();
    CHECK(c.relative_error() < 1e-5);
}

TEST_CASE("interpreter rejects schedules it cannot run", "[cpu]") {
    Chain c = make_chain({});
    Schedule& s = c.schedule;
    auto rejects = [&](const std::string& expected) {
        CHECK_THAT(error_of([&] { Interpreter(s, c.memory()); }), Contains(expected));
    };
    SECTION("unknown opcode") {
        s.streams[1][0].opcode = 200;
        rejects("sm 1 #0: unknown opcode 200");
    }
    SECTION("counter out of range") {
        s.streams[0][2].waits[0].counter = 9;
        rejects("sm 0 #2 (matvec_add w=1 rows [0, 16) k=64): waits on counter 9, the schedule has 3");
    }
    SECTION("page count disagreeing with the plan") {
        s.streams[0][0].n_pages = 2;
        rejects("sm 0 #0 (matvec_add w=0 rows [0, 16) k=64): the instruction records 2 pages, its page plan needs 3");
    }
    SECTION("more pages than the SM has") {
        s.streams[1][0].n_pages = 7;
        rejects("sm 1 #0 (matvec_add w=0 rows [16, 32) k=64): the instruction needs 7 pages, the SM has 3");
    }
    SECTION("a step total the signals do not add up to") {
        s.counters[1].step_total = 5;
        rejects("counter 1 'stage1' receives 4 a step, but its step_total is 5");
    }
    SECTION("a region past the arena") {
        s.arena_bytes -= 4;
        rejects("writes arena bytes [960, 1024) past the arena's 1020 bytes");
    }
    SECTION("a weight the program has in another shape") {
        c.weights[2].rows = 32;
        rejects("weight 2 is expected as dtype 0 [64, 64]");
    }
    SECTION("streams and SMs disagree") {
        s.target.n_sms = 3;
        rejects("2 streams for 1 rank(s) of 3 SMs");
    }
}

// The exact H200 schedule must run on a laptop: 132 virtual SMs on 2 threads should cost little
// more than 2 SMs doing the same work. Timing is noisy on shared machines, so this only reports.
TEST_CASE("interpreter overhead of many virtual SMs", "[cpu][.bench]") {
    for (uint32_t dim : {1024u, 256u})  // ~8k and ~1k multiply-adds an instruction
    for (uint32_t n_sms : {2u, 132u}) {
        ChainSpec spec;
        spec.n_sms = n_sms;
        spec.n_stages = 16;
        spec.dim = dim;
        spec.block_rows = dim / 128;
        spec.page_bytes = 16384;
        spec.n_pages = 13;
        Chain c = make_chain(spec);
        Interpreter interp(c.schedule, c.memory(), {2});
        StepState step;
        interp.run_step(step);
        const auto start = std::chrono::steady_clock::now();
        const uint32_t n_steps = 50;
        for (uint32_t e = 1; e <= n_steps; ++e) {
            step.epoch = e;
            interp.run_step(step);
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        WARN(n_sms << " SMs, " << c.schedule.n_instructions() << " instructions of " << spec.block_rows << "x" << dim
                   << ": " << ms / n_steps << " ms/step");
    }
}

TEST_CASE("interpreter gives every op the state of the step it runs in", "[cpu]") {
    EmbedChain e = make_embed_chain(1);
    Chain& c = e.chain;
    Interpreter interp(c.schedule, c.memory(), {4});
    StepState states[2];  // alternating objects, the idle one poisoned: a stale pointer would fail
    for (uint32_t epoch = 0; epoch < 64; ++epoch) {
        StepState& step = states[epoch % 2];
        states[(epoch + 1) % 2].token = 99;
        step.epoch = epoch;
        step.token = int32_t(epoch * 3 % 5);
        interp.run_step(step);
        CHECK(std::memcmp(c.arena.data(), &e.table[size_t(step.token) * c.spec.dim], 4 * c.spec.dim) == 0);
    }
}

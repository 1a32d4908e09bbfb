// Simulator tests: makespans computed by hand on small schedules, the per-SM split, the critical
// path, attention scaling with the position, and the trace and SVG renderings.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "instructions/transfer/transfer.hpp"
#include "models/error.hpp"
#include "scheduler/simulate.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;

namespace {

// 2 GB/s over 2 SMs is 1 byte/ns per SM; compute is negligible at 1000 GFLOP/s.
Schedule timed(uint32_t n_sms, uint32_t n_counters) {
    Schedule s = tiny_schedule(n_sms, n_counters);
    s.target.bandwidth_gbs = 1.0 * n_sms;
    s.target.sm_gflops = 1000.0;
    s.target.instruction_ns = 100.0;
    s.target.hop_ns = 1000.0;
    return s;
}

// matvec of 4 rows x 4 cols: 4 * 64 weight bytes + 4 * (4 + 2 * 4) activation bytes = 304 ns (its 32 flops
// take 0.032 ns, and the cost is the larger of the two), + 100 ns to start.
constexpr double kMatvecNs = 404.0;

}  // namespace

TEST_CASE("a chain across two SMs takes both durations plus one hop", "[cpu]") {
    Schedule s = timed(2, 1);
    Instruction a = matvec(16, 4, 0, 4), b = matvec(0, 4, 8, 4);
    signal(a, 0);
    wait(b, 0, 1);
    s.streams = {{a}, {b}};
    finish(s);
    const Simulation sim = simulate(s);
    CHECK(sim.makespan_ns == Approx(2 * kMatvecNs + 1000.0));
    CHECK(sim.timeline[1][0].ready_ns == Approx(kMatvecNs + 1000.0));
    CHECK(sim.timeline[1][0].start_ns == Approx(kMatvecNs + 1000.0));
    CHECK(sim.sms[0].busy_ns == Approx(kMatvecNs));
    CHECK(sim.sms[0].idle_ns == Approx(kMatvecNs + 1000.0));
    CHECK(sim.sms[0].wait_ns == Approx(0.0));
    CHECK(sim.sms[1].wait_ns == Approx(kMatvecNs + 1000.0));
    CHECK(sim.sms[1].idle_ns == Approx(0.0));
    CHECK(sim.critical_path == std::vector<std::pair<uint32_t, uint32_t>>{{0, 0}, {1, 0}});
    const OpTotal& mv = sim.ops[size_t(Opcode::matvec_add)];
    CHECK(mv.name == "matvec_add");
    CHECK(mv.count == 2);
    CHECK(mv.weight_bytes == 512);
    CHECK(sim.weight_bytes == 512);
    CHECK(sim.weight_gbs() == Approx(512.0 / sim.makespan_ns));

    // On one SM the signal needs no hop and the stream order is the chain.
    s.streams = {{a, b}, {}};
    finish(s);
    const Simulation local = simulate(s);
    CHECK(local.makespan_ns == Approx(2 * kMatvecNs));
    CHECK(local.critical_path == std::vector<std::pair<uint32_t, uint32_t>>{{0, 0}, {0, 1}});
}

TEST_CASE("a wait is met by the signal that reaches its target, not the first one", "[cpu]") {
    // SM 0 signals after one matvec, SM 1 after two; SM 2 waits for both and then runs one more.
    Schedule s = timed(3, 1);
    Instruction a = matvec(16, 4, 0, 4), c1 = matvec(20, 4, 4, 4), c2 = matvec(20, 4, 8, 4), b = matvec(0, 4, 12, 4);
    signal(a, 0);
    signal(c2, 0);
    wait(b, 0, 2);
    s.streams = {{a}, {c1, c2}, {b}};
    finish(s);
    const Simulation sim = simulate(s);
    CHECK(sim.timeline[2][0].start_ns == Approx(2 * kMatvecNs + 1000.0));
    CHECK(sim.makespan_ns == Approx(3 * kMatvecNs + 1000.0));
    CHECK(sim.critical_path == std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}, {1, 1}, {2, 0}});
    CHECK(sim.sms[0].idle_ns == Approx(2 * kMatvecNs + 1000.0));
}

TEST_CASE("attention cost follows the simulated position", "[cpu]") {
    Schedule s = timed(1, 0);
    s.streams = {{attn_read(0, 8, 12, 16)}};
    finish(s);
    const double at_511 = simulate(s).makespan_ns - s.target.instruction_ns;
    const double at_1023 = simulate(s, {.position = 1023}).makespan_ns - s.target.instruction_ns;
    CHECK(at_1023 == Approx(2 * at_511).epsilon(0.01));
}

TEST_CASE("a schedule that cannot finish is refused by the simulator", "[cpu]") {
    Schedule s = timed(1, 1);
    Instruction a = matvec(0, 1, 0, 1);
    wait(a, 0, 1);
    s.streams = {{a}};
    finish(s);
    CHECK_THROWS_WITH(simulate(s), Catch::Contains("simulate: sm 0 #0 (matvec_add") && Catch::Contains("deadlocks"));
}

TEST_CASE("chrome trace and SVG show every instruction", "[cpu]") {
    Schedule s = timed(2, 1);
    s.policy = "critical-path";
    Instruction a = matvec(16, 4, 0, 4), b = matvec(0, 4, 8, 4), k = kv_write(false, 1, 0, 4);
    signal(a, 0);
    wait(b, 0, 1);
    s.streams = {{a, k}, {b}};
    finish(s);
    const Simulation sim = simulate(s);

    const auto trace = nlohmann::json::parse(simulation_to_chrome_trace(s, sim));
    int complete = 0, threads = 0;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] == "X") {
            ++complete;
            CHECK(e["dur"].get<double>() > 0);
            if (e["tid"] == 1) {
                CHECK(e["name"] == "matvec_add");
                CHECK(e["args"]["waited_on"] == "sm 0 #0");
                CHECK(e["ts"].get<double>() == Approx((kMatvecNs + 1000.0) / 1000.0));
            }
        }
        if (e["ph"] == "M" && e["name"] == "thread_name") ++threads;
    }
    CHECK(complete == 3);
    CHECK(threads == 2);
    CHECK(trace["otherData"]["makespan_us"].get<double>() == Approx(sim.makespan_ns / 1000.0));

    const std::string svg = simulation_to_svg(s, sim);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    size_t rects = 0;
    for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++rects;
    CHECK(rects == 3 + 2);  // instructions + legend entries (matvec_add, rms_qkv)
    CHECK(svg.find(">rms_qkv</text>") != std::string::npos);
    CHECK(svg.find("time (us)") != std::string::npos);
    CHECK(svg.find("critical-path on tiny (2 SMs)") != std::string::npos);
}

namespace {

// Two ranks of one SM each: rank 0 computes a matvec and sends 16 bytes to rank 1, whose last matvec waits
// for them after `n_before` matvecs of its own. The link moves 1 byte/ns and a cross-rank signal takes 2 us.
Schedule exchange(uint32_t n_before) {
    Schedule s = timed(1, 2);
    s.tp_size = 2;
    s.target.link_gbs = 1.0;
    s.target.link_ns = 2000.0;
    s.rank_arena_bytes = 128;
    Instruction a = matvec(16, 4, 0, 4), t{}, c = matvec(32, 4, 40, 4);
    t.opcode = uint16_t(Opcode::transfer);
    encode_args(TransferArgs{0, 128, 16, 1}, t);
    signal(a, 0);
    wait(t, 0, 1);
    signal(t, 1);
    wait(c, 1, 1);
    s.streams = {{a, t}, {}};
    for (uint32_t i = 0; i < n_before; ++i) s.streams[1].push_back(matvec(48, 4, 52, 4));
    s.streams[1].push_back(c);
    finish(s);
    return s;
}

// The transfer: 100 ns to start + 16 bytes at 1 byte/ns from memory + 16 bytes at 1 byte/ns over the link.
constexpr double kTransferNs = 132.0;

}  // namespace

TEST_CASE("a transfer costs its link bytes and a cross-rank signal link_ns", "[cpu]") {
    const Schedule s = exchange(0);
    const Simulation sim = simulate(s);
    CHECK(sim.timeline[0][1].end_ns == Approx(kMatvecNs + kTransferNs));
    CHECK(sim.timeline[1][0].start_ns == Approx(kMatvecNs + kTransferNs + 2000.0));
    CHECK(sim.makespan_ns == Approx(2 * kMatvecNs + kTransferNs + 2000.0));
    // A free exchange: the transfer takes no time and its signal a hop.
    const Simulation free = simulate(s, {.free_exchange = true});
    CHECK(free.timeline[0][1].end_ns == Approx(kMatvecNs));
    CHECK(free.makespan_ns == Approx(2 * kMatvecNs + 1000.0));
}

TEST_CASE("the exchange summary: per-rank totals, exposed and hidden time", "[cpu]") {
    // Nothing to overlap: everything the exchange adds beyond a hop is exposed.
    Schedule s = exchange(0);
    ExchangeSummary x = summarize_exchange(s, simulate(s));
    REQUIRE(x.ranks.size() == 2);
    CHECK(x.ranks[0].first_sm == 0);
    CHECK(x.ranks[1].first_sm == 1);
    CHECK(x.ranks[0].n_instructions == 2);
    CHECK(x.ranks[0].weight_bytes == 256);
    CHECK(x.ranks[0].busy_ns == Approx(kMatvecNs + kTransferNs));
    CHECK(x.ranks[0].n_transfers == 1);
    CHECK(x.ranks[0].sent_bytes == 16);
    CHECK(x.ranks[1].n_transfers == 0);
    CHECK(x.ranks[1].in_flight_ns == 0.0);
    // In flight from the transfer's start to 1 us (link_ns - hop_ns) after its end.
    CHECK(x.ranks[0].in_flight_ns == Approx(kTransferNs + 1000.0));
    CHECK(x.step_ns == Approx(2 * kMatvecNs + kTransferNs + 2000.0));
    CHECK(x.free_step_ns == Approx(2 * kMatvecNs + 1000.0));
    CHECK(x.exposed_ns() == Approx(kTransferNs + 1000.0));
    CHECK(x.hidden() == Approx(0.0).margin(1e-12));

    // Rank 1 busy with five matvecs until 2020 ns: the data lands at 2536 ns (1404 ns with a free exchange),
    // so 516 ns of the 1132 in flight are exposed.
    s = exchange(5);
    x = summarize_exchange(s, simulate(s));
    CHECK(x.step_ns == Approx(kMatvecNs + kTransferNs + 2000.0 + kMatvecNs));
    CHECK(x.free_step_ns == Approx(6 * kMatvecNs));
    CHECK(x.exposed_ns() == Approx(kTransferNs + 2000.0 - 4 * kMatvecNs));
    CHECK(x.hidden() == Approx(1.0 - 516.0 / 1132.0));

    // Rank 1's own work (7 matvecs, until 2828 ns) outlasts the exchange: all of it is hidden.
    s = exchange(7);
    x = summarize_exchange(s, simulate(s));
    CHECK(x.step_ns == Approx(8 * kMatvecNs));
    CHECK(x.exposed_ns() == Approx(0.0).margin(1e-9));
    CHECK(x.hidden() == Approx(1.0));
}

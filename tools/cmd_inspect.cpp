// mk inspect: what a .mks schedule holds — per-op and per-SM counts, bytes, the simulated step
// (makespan, critical path, load balance), the verifier's verdict; --svg / --trace draw the timeline.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "instructions/registry.hpp"
#include "models/error.hpp"
#include "scheduler/device_calibration.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/simulate.hpp"
#include "scheduler/verify.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    if (!out) fail("{}: cannot write", path);
}

// The per-rank table and the exchange's cost, each number with its definition.
void print_ranks(const Schedule& s, const ExchangeSummary& x) {
    fmt::print("\n{:<5} {:>9} {:>12} {:>11} {:>7} {:>10} {:>9} {:>14}\n", "rank", "SMs", "instructions", "weight MB",
               "busy %", "transfers", "sent KB", "in flight us");
    for (size_t k = 0; k < x.ranks.size(); ++k) {
        const RankTotals& r = x.ranks[k];
        fmt::print("{:<5} {:>9} {:>12} {:>11.1f} {:>7.1f} {:>10} {:>9.1f} {:>14.1f}\n", k,
                   fmt::format("{}..{}", r.first_sm, r.first_sm + r.n_sms - 1), r.n_instructions, r.weight_bytes / 1e6,
                   100.0 * r.busy_ns / (x.step_ns * r.n_sms), r.n_transfers, r.sent_bytes / 1e3, r.in_flight_ns / 1e3);
    }
    fmt::print("in flight: the union over a rank's transfers of [start, end + link_ns - hop_ns) ({:.0f} - {:.0f} ns)\n",
               s.target.link_ns, s.target.hop_ns);
    fmt::print("exchange exposed {:.1f} us ({:.1f}% of the step): step {:.1f} us - {:.1f} us with a free exchange "
               "(transfers take no time, cross-rank signals hop_ns)\n",
               x.exposed_ns() / 1e3, 100.0 * x.exposed_ns() / x.step_ns, x.step_ns / 1e3, x.free_step_ns / 1e3);
    const double hidden_pct = std::round(1000.0 * x.hidden()) / 10.0 + 0.0;  // + 0.0: no "-0.0" from rounding noise
    fmt::print("exchange hidden {:.1f}% = 1 - exposed / in flight of the busiest rank ({:.1f} us)\n", hidden_pct,
               x.in_flight_ns() / 1e3);
}

// Waits whose counter only instructions earlier in the waiter's own stream signal: program order and the team
// barrier already order them, so a shared-memory flag (or nothing) could replace the global counter.
size_t same_sm_waits(const Schedule& s, size_t& waits) {
    std::vector<std::vector<std::pair<size_t, size_t>>> signallers(s.counters.size());  // (sm, index)
    for (size_t sm = 0; sm < s.streams.size(); ++sm)
        for (size_t i = 0; i < s.streams[sm].size(); ++i)
            for (uint32_t k = 0; k < s.streams[sm][i].n_signals; ++k)
                signallers[s.streams[sm][i].signals[k].counter].push_back({sm, i});
    size_t local = 0;
    waits = 0;
    for (size_t sm = 0; sm < s.streams.size(); ++sm)
        for (size_t i = 0; i < s.streams[sm].size(); ++i)
            for (uint32_t w = 0; w < s.streams[sm][i].n_waits; ++w) {
                ++waits;
                const auto& from = signallers[s.streams[sm][i].waits[w].counter];
                local += std::all_of(from.begin(), from.end(), [&](auto p) { return p.first == sm && p.second < i; });
            }
    return local;
}

void print_inspection(const Schedule& s, const Simulation& sim, const SimOptions& options, const VerifyReport& report) {
    const std::string ranks = s.tp_size > 1 ? fmt::format("{} ranks x ", s.tp_size) : "";
    fmt::print("target {} ({}{} SMs, {} pages of {} bytes), policy {}, config hash {:016x}\n", s.target.name, ranks,
               s.target.n_sms, s.target.n_pages, s.target.page_bytes, s.policy, s.config_hash);
    if (s.prefill_tokens)
        fmt::print("prefill step: chunks of up to {} tokens, logits of {}\n", s.prefill_tokens,
                   s.all_logits ? "every token" : "the last token");
    fmt::print("{} instructions, {} counters, arena {} bytes, {} attention chunks, {} LM-head blocks\n\n",
               s.n_instructions(), s.counters.size(), s.arena_bytes, s.n_attn_parts, s.n_lm_blocks);
    if (options.device) {
        // Parts summed over the SMs: overhead and consume are the consumers' serial path, load the loader's
        // fills that overlap them; an instruction takes max(load, overhead + consume).
        fmt::print("{:<14} {:>7} {:>14} {:>12} {:>7} {:>12} {:>12} {:>12}\n", "op", "count", "weight bytes", "busy us",
                   "busy %", "overhead us", "consume us", "load us");
        double busy_total = 0;
        for (const OpTotal& op : sim.ops) busy_total += op.busy_ns;
        for (const OpTotal& op : sim.ops)
            if (op.count)
                fmt::print("{:<14} {:>7} {:>14} {:>12.1f} {:>7.1f} {:>12.1f} {:>12.1f} {:>12.1f}\n", op.name, op.count,
                           op.weight_bytes, op.busy_ns / 1e3, 100.0 * op.busy_ns / busy_total, op.overhead_ns / 1e3,
                           op.consume_ns / 1e3, op.load_ns / 1e3);
        fmt::print("\n{:<28} {:>13} {:>7} {:>12}\n", "matrix (tile shape)", "rows per tile", "tiles",
                   "warps busy");
        for (const TileShape& t : device_tile_shapes(s, *options.device))
            fmt::print("{:<28} {:>13} {:>7} {:>9} of {}\n", t.weight, t.rows_per_tile, t.tiles, t.warps_busy, t.warps);
        if (s.prefill_tokens) {  // what bounds a prefill step: every SM streaming, or every SM's math units busy
            const PrefillBounds b = prefill_bounds(s, *options.device, options.position);
            const double n = double(s.streams.size());
            fmt::print("prefill bounds (ms, all SMs at once): DRAM {:.3f} ({:.2f} GB at {:.0f} GB/s), L2 {:.3f} ({:.2f} GB "
                       "at {:.0f} GB/s: later token blocks' rows, activations as read), tensor-core flops {:.3f} ({:.2f} "
                       "TFLOP issued at {:.0f} TFLOPS), tensor-core ops' instruction issue {:.3f} ({:.1f} G instructions at "
                       "{:.0f} G/s, {:.2f} G of them conversions at {:.0f} G/s), k-step round trips {:.3f} (each "
                       "warp's inputs of a k-step {}, then its MMAs), other flops {:.3f} ({:.2f} TFLOP at {:.0f} "
                       "TFLOPS): {} bound the step\n",
                       b.dram_ms, b.dram_bytes / 1e9, s.target.bandwidth_gbs, b.l2_ms, b.l2_bytes / 1e9,
                       options.device->l2_gbs, b.tensor_ms, b.tensor_flops / 1e12,
                       n * options.device->sm_tensor_gflops / 1e3, b.issue_ms, b.mma_instructions / 1e9,
                       n * options.device->sm_issue_per_ns, b.mma_conversions / 1e9,
                       n * options.device->sm_convert_per_ns, b.chain_ms,
                       options.device->code.mma_prefetch_k_steps
                           ? fmt::format("from L1 ({:.0f} ns), prefetched up to {} k-steps ahead ({:.0f} ns from L2)",
                                         options.device->l1_load_ns, options.device->code.mma_prefetch_k_steps,
                                         options.device->l2_load_ns)
                           : fmt::format("from L2 ({:.0f} ns)", options.device->l2_load_ns),
                       b.other_ms, b.other_flops / 1e12,
                       n * s.target.sm_gflops / 1e3, b.bound());
        }
        size_t waits = 0;
        const size_t local = same_sm_waits(s, waits);
        fmt::print("counter waits: {}, of which {} on counters only earlier instructions of the same SM signal\n",
                   waits, local);
    } else {
        fmt::print("{:<14} {:>7} {:>14} {:>12}\n", "op", "count", "weight bytes", "busy us");
        for (const OpTotal& op : sim.ops)
            if (op.count)
                fmt::print("{:<14} {:>7} {:>14} {:>12.1f}\n", op.name, op.count, op.weight_bytes, op.busy_ns / 1e3);
    }

    std::vector<uint64_t> bytes(s.streams.size(), 0);
    for (size_t sm = 0; sm < s.streams.size(); ++sm)
        for (const Instruction& ins : s.streams[sm])
            bytes[sm] += op_info(ins.opcode).cost(ins, s.dims, s.weights.data()).weight_bytes;
    auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    double busy_max = 0, busy_sum = 0;
    for (const SmTime& t : sim.sms) {
        busy_max = std::max(busy_max, t.busy_ns);
        busy_sum += t.busy_ns;
    }
    fmt::print("\nper SM: instructions {}..{}, weight bytes {}..{}, busy {:.1f}% on average (max SM {:.1f} us)\n",
               std::min_element(s.streams.begin(), s.streams.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size(),
               std::max_element(s.streams.begin(), s.streams.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size(),
               *lo, *hi, 100.0 * busy_sum / (sim.makespan_ns * s.streams.size()), busy_max / 1e3);
    if (s.tp_size > 1) print_ranks(s, summarize_exchange(s, sim, options));
    const std::string per_rank = s.tp_size > 1 ? fmt::format(" ({:.0f} per rank)", sim.weight_gbs() / s.tp_size) : "";
    if (options.device)
        fmt::print("cost model: device ({}) at position {}; step {:.1f} us + boundary {:.1f} us = {}, "
                   "{:.1f}% of {:.0f} GB/s\n",
                   options.device->name, options.position, sim.makespan_ns / 1e3, sim.step_boundary_ns / 1e3,
                   step_time_summary(sim.token_ns(), s.prefill_tokens), 100.0 * sim.weight_gbs() / s.target.bandwidth_gbs,
                   s.target.bandwidth_gbs);
    else
        fmt::print("cost model: ideal (bytes at the SM's share of bandwidth + instruction_ns) at position {}\n",
                   options.position);
    fmt::print("predicted step {:.1f} us, {:.0f} GB/s of weights{}; critical path {} instructions:\n",
               sim.makespan_ns / 1e3, sim.weight_gbs(), per_rank, sim.critical_path.size());
    const size_t shown = std::min<size_t>(sim.critical_path.size(), 12);
    for (size_t i = 0; i < shown; ++i) {
        auto [sm, index] = sim.critical_path[sim.critical_path.size() - shown + i];
        const SimEvent& e = sim.timeline[sm][index];
        fmt::print("  sm {:>3} #{:<4} {:>9.1f}..{:>9.1f} us  {}\n", sm, index, e.start_ns / 1e3, e.end_ns / 1e3,
                   op_info(s.streams[sm][index].opcode).describe(s.streams[sm][index]));
    }
    fmt::print("verifier: {}\n", report.summary());
}

}  // namespace

void register_inspect(CLI::App& app) {
    struct Options {
        std::string file, svg, trace;
        uint32_t position = 511;
        std::string cost = "auto";
        std::string calibration;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("inspect", "Describe a .mks schedule: counts, bytes, simulated timeline, verdict");
    cmd->add_option("schedule", o->file, "The .mks file")->required();
    cmd->add_option("--svg", o->svg, "Write a per-SM Gantt chart of the simulated step (SVG)");
    cmd->add_option("--trace", o->trace, "Write the simulated step as a Chrome/Perfetto trace (JSON)");
    cmd->add_option("--position", o->position,
                    "Token position the simulation assumes (attention cost grows with it); for a prefill schedule the "
                    "chunk's last token's, so the default 511 prices a 512-token chunk from position 0");
    cmd->add_option("--cost", o->cost,
                    "Cost model: device (the resident CUDA interpreter, scheduler/device_cost.hpp) | ideal (bytes at "
                    "the SM's share of bandwidth) | auto (device unless the target is cpu)")
        ->check(CLI::IsMember({"auto", "device", "ideal"}));
    cmd->add_option("--calibration", o->calibration,
                    "Price the device cost model with the constants measured into this file (mk devices --calibrate) "
                    "instead of the assumed ones");
    cmd->callback([o] {
        Schedule s = load_schedule(o->file);
        SimOptions so;
        so.position = o->position;
        std::string calibration_report;
        const DeviceModel device = calibrated_device_model(o->calibration, s.target, calibration_report);
        if (o->cost == "device" || (o->cost == "auto" && s.target.name != "cpu")) so.device = &device;
        if (!o->calibration.empty() && !so.device)
            fail("--calibration {}: prices the device cost model, which --cost {} on target {} does not use",
                 o->calibration, o->cost, s.target.name);
        fmt::print("{}", calibration_report);
        VerifyReport report = verify(s);
        if (report.count(VerifyCheck::structure))  // the simulator needs a well-formed schedule
            fail("{}: {}", o->file, report.summary());
        Simulation sim = simulate(s, so);
        print_inspection(s, sim, so, report);
        if (!o->svg.empty()) write_text(o->svg, simulation_to_svg(s, sim));
        if (!o->trace.empty()) write_text(o->trace, simulation_to_chrome_trace(s, sim));
        if (!report.ok) fail("{}: the schedule failed verification", o->file);
    });
}

}  // namespace mk::tools

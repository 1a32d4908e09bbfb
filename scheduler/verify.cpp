// The verifier's driver and its local checks: structure, counter totals and bounds, page plans.
// The ordering checks (deadlock, races, cross-step fence) live in verify_order.cpp.
#include "scheduler/verify.hpp"

#include <chrono>

#include "instructions/registry.hpp"
#include "models/error.hpp"
#include "scheduler/verify_internal.hpp"

namespace mk {

const char* verify_check_name(VerifyCheck check) {
    static const char* const kNames[] = {"structure", "counters", "pages", "deadlock", "race", "fence", "ranks"};
    static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(VerifyCheck::count));
    return size_t(check) < size_t(VerifyCheck::count) ? kNames[size_t(check)] : "?";
}

std::string VerifyReport::summary() const {
    size_t total = 0;
    std::string counts;
    for (size_t c = 0; c < n_errors.size(); ++c) {
        if (!n_errors[c]) continue;
        total += n_errors[c];
        counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", verify_check_name(VerifyCheck(c)), n_errors[c]);
    }
    if (total == 0)
        return fmt::format("ok: {} instructions on {} streams, {} counters, {} orderings checked ({:.1f} ms)",
                           stats.n_instructions, stats.n_streams, stats.n_counters,
                           stats.n_conflicts + stats.n_fence_checks, stats.elapsed_ms);
    std::string out = fmt::format("{} error{} ({})", total, total == 1 ? "" : "s", counts);
    for (const std::string& e : errors) out += "\n  " + e;
    if (errors.size() < total) out += fmt::format("\n  ... and {} more", total - errors.size());
    return out;
}

namespace verify_detail {

std::string Context::label(uint32_t flat) const {
    const Instruction& i = *ins[flat];
    std::string what = is_valid_opcode(i.opcode) ? op_info(i.opcode).describe(i) : fmt::format("opcode {}", i.opcode);
    return fmt::format("sm {} #{} ({})", stream_of[flat], index_of(flat), what);
}

std::string Context::counter_label(uint32_t counter) const {
    if (counter >= schedule.counters.size()) return fmt::format("counter {}", counter);
    return fmt::format("counter {} ({})", counter, schedule.counters[counter].name);
}

bool Context::add(VerifyCheck check, std::string message) {
    report.ok = false;
    report.n_errors[size_t(check)]++;
    if (report.errors.size() < options.max_errors) report.errors.push_back(std::move(message));
    if (options.stop_at_first_error) stopped = true;
    return !stopped;
}

}  // namespace verify_detail

namespace {

using verify_detail::Context;

// Everything later checks index with: opcodes, wait/signal counts and counter ids, seq numbering.
// Fills the flattened view. False when the schedule is too malformed to analyse further.
bool check_structure(Context& ctx) {
    const Schedule& s = ctx.schedule;
    bool good = true;
    auto bad = [&](std::string message) {
        good = false;
        return ctx.add(VerifyCheck::structure, std::move(message));
    };
    if (s.tp_size == 0 || s.streams.size() != uint64_t(s.target.n_sms) * s.tp_size)
        if (!bad(fmt::format("structure: {} streams for {} rank(s) of {} SMs", s.streams.size(), s.tp_size,
                             s.target.n_sms)))
            return false;
    if (s.counters.size() > 0x10000 && !bad(fmt::format("structure: {} counters, ids are 16-bit", s.counters.size())))
        return false;
    if (s.weights.size() != n_weight_ids(s.dims.n_layers) &&
        !bad(fmt::format("structure: {} weight formats, {} layers need {}", s.weights.size(), s.dims.n_layers,
                         n_weight_ids(s.dims.n_layers))))
        return false;
    for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
        ctx.offset.push_back(ctx.n);
        for (const Instruction& i : s.streams[sm]) {
            ctx.stream_of.push_back(sm);
            ctx.ins.push_back(&i);
            ++ctx.n;
        }
    }
    ctx.report.stats.n_streams = s.streams.size();
    ctx.report.stats.n_instructions = ctx.n;
    ctx.report.stats.n_counters = s.counters.size();

    std::vector<uint32_t> seq_owner(ctx.n, UINT32_MAX);
    ctx.waits.resize(ctx.n);
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const Instruction& i = *ctx.ins[f];
        const std::string where = fmt::format("sm {} #{}", ctx.stream_of[f], ctx.index_of(f));
        if (!is_valid_opcode(i.opcode) && !bad(fmt::format("structure: {} has invalid opcode {}", where, i.opcode)))
            break;
        if (i.n_waits > kMaxWaits &&
            !bad(fmt::format("structure: {} has {} waits (max {})", where, i.n_waits, kMaxWaits)))
            break;
        if (i.n_signals > kMaxSignals &&
            !bad(fmt::format("structure: {} has {} signals (max {})", where, i.n_signals, kMaxSignals)))
            break;
        if (is_valid_opcode(i.opcode)) {
            try {
                check_weight_ids(i, s.weights);
                (void)op_info(i.opcode).accesses(i, s.dims);  // arguments the op's spec refuses (mk::Error)
            } catch (const Error& e) {
                if (!bad(fmt::format("structure: {}: {}", where, e.what()))) break;
            }
        }
        for (uint32_t w = 0; w < std::min<uint32_t>(i.n_waits, kMaxWaits); ++w) {
            if (i.waits[w].counter >= s.counters.size())
                bad(fmt::format("structure: {} wait {} names counter {} of {}", where, w, i.waits[w].counter,
                                s.counters.size()));
            if (i.waits[w].operand > uint16_t(Operand::token))
                bad(fmt::format("structure: {} wait {} guards unknown operand {}", where, w, i.waits[w].operand));
        }
        for (uint32_t k = 0; k < std::min<uint32_t>(i.n_signals, kMaxSignals); ++k)
            if (i.signals[k].counter >= s.counters.size())
                bad(fmt::format("structure: {} signal {} names counter {} of {}", where, k, i.signals[k].counter,
                                s.counters.size()));
        if (i.seq >= ctx.n) {
            bad(fmt::format("structure: {} has seq {} but a step has only {} instructions", where, i.seq, ctx.n));
        } else if (seq_owner[i.seq] != UINT32_MAX) {
            const uint32_t o = seq_owner[i.seq];
            bad(fmt::format("structure: {} and sm {} #{} share seq {}", where, ctx.stream_of[o], ctx.index_of(o),
                            i.seq));
        } else {
            seq_owner[i.seq] = f;
        }
    }
    if (!good) return false;

    std::vector<std::vector<bool>> ignored(ctx.n);
    for (const WaitRef& r : ctx.options.ignore_waits) {
        if (r.sm >= s.streams.size() || r.index >= s.streams[r.sm].size() ||
            r.slot >= s.streams[r.sm][r.index].n_waits) {
            if (!bad(fmt::format("structure: ignore_waits names sm {} #{} wait {}, which does not exist", r.sm, r.index,
                                 r.slot)))
                return false;
            continue;
        }
        auto& v = ignored[ctx.offset[r.sm] + r.index];
        v.resize(kMaxWaits, false);
        v[r.slot] = true;
    }
    for (uint32_t f = 0; f < ctx.n; ++f) {
        const Instruction& i = *ctx.ins[f];
        for (uint32_t w = 0; w < i.n_waits; ++w)
            if (ignored[f].empty() || !ignored[f][w]) ctx.waits[f].push_back(i.waits[w]);
        ctx.report.stats.n_waits += ctx.waits[f].size();
        ctx.report.stats.n_signals += i.n_signals;
    }
    return good;
}

// Declared per-step totals must equal the signals, and max_steps steps must fit the counter width.
void check_counters(Context& ctx) {
    const Schedule& s = ctx.schedule;
    std::vector<uint64_t> sum(s.counters.size(), 0);
    for (uint32_t f = 0; f < ctx.n; ++f)
        for (uint32_t k = 0; k < ctx.ins[f]->n_signals; ++k)
            sum[ctx.ins[f]->signals[k].counter] += ctx.ins[f]->signals[k].delta;
    ctx.step_total = sum;
    const uint32_t bits = std::min<uint32_t>(ctx.options.counter_bits, 64);
    const uint64_t max_value = bits >= 64 ? UINT64_MAX : (uint64_t(1) << bits) - 1;
    const uint64_t steps = std::max<uint64_t>(ctx.options.max_steps, 1);
    uint64_t max_total = 0;
    for (uint32_t c = 0; c < s.counters.size() && !ctx.stopped; ++c) {
        max_total = std::max(max_total, sum[c]);
        if (sum[c] != s.counters[c].step_total)
            ctx.add(VerifyCheck::counters,
                    fmt::format("counters: {} declares step_total {} but its signals add {} per step",
                                ctx.counter_label(c), s.counters[c].step_total, sum[c]));
        if (sum[c] > max_value / steps)
            ctx.add(VerifyCheck::counters,
                    fmt::format("counters: {} grows by {} a step; {} steps overflow a {}-bit counter",
                                ctx.counter_label(c), sum[c], steps, bits));
    }
    ctx.report.stats.max_step_total = max_total;
    ctx.report.stats.u32_wrap_steps = max_total ? (uint64_t(UINT32_MAX) + 1) / max_total : 0;
}

void check_pages(Context& ctx) {
    const Schedule& s = ctx.schedule;
    const PlanInputs in = plan_inputs(s.target, s.weights.data());
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const Instruction& i = *ctx.ins[f];
        if (i.n_pages > s.target.n_pages)
            ctx.add(VerifyCheck::pages,
                    fmt::format("pages: {} needs {} pages, target has {}", ctx.label(f), i.n_pages, s.target.n_pages));
        try {
            const PagePlan plan = op_info(i.opcode).page_plan(i, in);
            if (plan.n_pages != i.n_pages)
                ctx.add(VerifyCheck::pages, fmt::format("pages: {} declares {} pages but its page plan uses {}",
                                                        ctx.label(f), i.n_pages, plan.n_pages));
        } catch (const Error& e) {
            ctx.add(VerifyCheck::pages, fmt::format("pages: {}: {}", ctx.label(f), e.what()));
        }
    }
}

}  // namespace

VerifyReport verify(const Schedule& schedule, const VerifyOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    VerifyReport report;
    Context ctx(schedule, options, report);
    if (check_structure(ctx)) {
        check_counters(ctx);
        if (!ctx.stopped) check_pages(ctx);
        if (!ctx.stopped) verify_detail::check_ranks(ctx);
        if (!ctx.stopped && report.count(VerifyCheck::counters) == 0) {
            // Ordering needs per-step totals that match the signals (epoch targets assume them).
            verify_detail::check_deadlock(ctx);
            if (!ctx.stopped) verify_detail::check_order(ctx);
        }
    }
    report.stats.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return report;
}

void verify_or_throw(const Schedule& schedule, const std::string& name, const VerifyOptions& options) {
    VerifyReport report = verify(schedule, options);
    if (!report.ok) fail("{}: schedule failed verification: {}", name, report.summary());
}

}  // namespace mk

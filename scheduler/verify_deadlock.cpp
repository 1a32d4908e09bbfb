// Deadlock: run one step greedily. Counters only grow, so the greedy run reaches the one maximal
// state every execution can reach; a stream stopped short of its end there is stuck in every
// execution, and the counter value it sees is the most that can ever be signalled before its wait.
// One step suffices: if step 0 always completes, every later step starts from the same state.
#include <fmt/format.h>

#include "instructions/registry.hpp"
#include "scheduler/verify_progress.hpp"

namespace mk::verify_detail {

namespace {

// Streams that still owe a signal to `counter` in step 0, with the first such instruction.
std::vector<std::pair<uint32_t, uint32_t>> pending_signals(const Context& ctx, const Progress& run, uint32_t counter) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (uint32_t sm = 0; sm < ctx.offset.size(); ++sm)
        for (uint32_t i = run.pc(sm); i < ctx.stream_size(sm); ++i) {
            const Instruction& ins = *ctx.ins[ctx.offset[sm] + i];
            bool signals = false;
            for (uint32_t k = 0; k < ins.n_signals; ++k)
                signals |= ins.signals[k].counter == counter && ins.signals[k].delta;
            if (signals) {
                out.push_back({sm, i});
                break;
            }
        }
    return out;
}

// A cycle among the stuck streams: sm -> the streams that owe the counter it is stuck on.
std::vector<uint32_t> find_cycle(const std::vector<std::vector<uint32_t>>& owes) {
    const size_t n = owes.size();
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS stack, 2 done
    std::vector<uint32_t> stack;
    std::vector<size_t> next(n, 0);
    for (uint32_t root = 0; root < n; ++root) {
        if (color[root] || owes[root].empty()) continue;
        stack = {root};
        color[root] = 1;
        while (!stack.empty()) {
            const uint32_t v = stack.back();
            if (next[v] == owes[v].size()) {
                color[v] = 2;
                stack.pop_back();
                continue;
            }
            const uint32_t w = owes[v][next[v]++];
            if (color[w] == 1) {
                std::vector<uint32_t> cycle(std::find(stack.begin(), stack.end(), w), stack.end());
                cycle.push_back(w);
                return cycle;
            }
            if (color[w] == 0) {
                color[w] = 1;
                stack.push_back(w);
            }
        }
    }
    return {};
}

}  // namespace

bool check_deadlock(Context& ctx) {
    Progress run(ctx);
    run.reset([&](uint32_t sm) { return ctx.stream_size(sm); });  // step 0 only: a 1-token generation
    run.run([](uint32_t, uint32_t, uint32_t) {});

    std::vector<std::vector<uint32_t>> owes(ctx.offset.size());
    bool stuck = false;
    for (uint32_t sm = 0; sm < ctx.offset.size() && !ctx.stopped; ++sm) {
        if (run.pc(sm) >= ctx.stream_size(sm)) continue;
        stuck = true;
        const uint32_t flat = ctx.offset[sm] + run.pc(sm);
        const auto [counter, target] = run.blocking_wait(sm);
        const auto pending = pending_signals(ctx, run, counter);
        std::string why;
        if (pending.empty() || target > ctx.step_total[counter]) {
            why = fmt::format(" (the counter receives only {} a step)", ctx.step_total[counter]);
        } else {
            why = " (still to signal it:";
            for (size_t k = 0; k < pending.size() && k < 4; ++k) {
                const auto [owner, index] = pending[k];
                owes[sm].push_back(owner);
                why += fmt::format(" sm {} #{}", owner, index);
                if (owner == sm)
                    why += " after this wait in its own stream";
                else
                    why += fmt::format(", itself stuck at sm {} #{}", owner, run.pc(owner));
                why += k + 1 < pending.size() ? ";" : ")";
            }
            if (pending.size() > 4) why += fmt::format(" and {} more)", pending.size() - 4);
            for (size_t k = 4; k < pending.size(); ++k) owes[sm].push_back(pending[k].first);
        }
        ctx.add(VerifyCheck::deadlock,
                fmt::format("deadlock: {} waits {} >= {} but at most {} can be signalled before it{}", ctx.label(flat),
                            ctx.counter_label(counter), target, run.value(counter), why));
    }
    if (!stuck) return true;
    const std::vector<uint32_t> cycle = find_cycle(owes);
    if (!cycle.empty() && !ctx.stopped) {
        std::string path;
        for (uint32_t sm : cycle) path += fmt::format("{}sm {} #{}", path.empty() ? "" : " -> ", sm, run.pc(sm));
        ctx.add(VerifyCheck::deadlock,
                fmt::format("deadlock: cycle {} (each waits for a signal the next can only send after its own wait)",
                            path));
    }
    return false;
}

}  // namespace mk::verify_detail

// Exhaustive interleaving search (see exhaustive.hpp). Deliberately naive: concrete byte and row
// cells, a hash set of visited states, every pair checked in every state.
#include "tests/scheduler/exhaustive.hpp"

#include <fmt/format.h>

#include <map>
#include <set>
#include <unordered_set>

#include "instructions/registry.hpp"

namespace mk::test {

namespace {

using Cells = std::map<std::pair<int, uint64_t>, bool>;  // (space, cell) -> written

Cells footprint(const Instruction& ins, const ModelDims& dims, uint32_t step, uint32_t n_steps) {
    const uint64_t rows = 2 * n_steps + 4, pos = 2 + 2 * step;
    Cells cells;
    for (const Access& a : op_info(ins.opcode).accesses(ins, dims)) {
        auto mark = [&](int space, uint64_t cell) { cells[{space, cell}] |= a.write; };
        if (a.space == Space::arena) {
            for (uint64_t b = a.begin; b < a.end; ++b) mark(0, b);
            continue;
        }
        const int space = a.space == Space::k_cache ? 1 : 2;
        uint64_t first = 0, last = rows;
        if (a.pos == PosMode::at_pos) first = pos, last = pos + 1;
        if (a.pos == PosMode::upto_pos) last = pos + 1;
        for (uint64_t slot = a.begin; slot < a.end; ++slot)
            for (uint64_t r = first; r < last; ++r) mark(space, slot * rows + r);
    }
    return cells;
}

bool conflict(const Cells& a, const Cells& b) {
    for (const auto& [cell, written] : a) {
        auto it = b.find(cell);
        if (it != b.end() && (written || it->second)) return true;
    }
    return false;
}

}  // namespace

Exploration explore(const Schedule& s, uint32_t n_steps) {
    const uint32_t n_streams = uint32_t(s.streams.size());
    std::vector<uint32_t> length(n_streams), base(n_streams);
    uint32_t n = 0;
    for (uint32_t t = 0; t < n_streams; ++t) {
        base[t] = n;
        n += uint32_t(s.streams[t].size());
        length[t] = n_steps * uint32_t(s.streams[t].size());
    }
    // Window nodes: (stream, position) -> id; order key step * n + seq.
    auto id = [&](uint32_t t, uint32_t p) {
        const uint32_t size = uint32_t(s.streams[t].size());
        return (p / size) * n + base[t] + p % size;
    };
    std::vector<const Instruction*> ins(n_steps * n);
    std::vector<uint64_t> order(n_steps * n);
    std::vector<Cells> cells(n_steps * n);
    for (uint32_t t = 0; t < n_streams; ++t)
        for (uint32_t p = 0; p < length[t]; ++p) {
            const uint32_t v = id(t, p), step = p / uint32_t(s.streams[t].size());
            ins[v] = &s.streams[t][p % s.streams[t].size()];
            order[v] = uint64_t(step) * n + ins[v]->seq;
            cells[v] = footprint(*ins[v], s.dims, step, n_steps);
        }
    std::vector<std::vector<bool>> conflicts(n_steps * n, std::vector<bool>(n_steps * n));
    for (uint32_t a = 0; a < n_steps * n; ++a)
        for (uint32_t b = 0; b < n_steps * n; ++b) conflicts[a][b] = a != b && conflict(cells[a], cells[b]);

    Exploration out;
    std::unordered_set<std::string> seen;
    std::vector<std::string> todo{std::string(n_streams, '\0')};
    seen.insert(todo.back());
    while (!todo.empty()) {
        const std::string pcs = todo.back();
        todo.pop_back();
        out.n_states++;
        std::vector<uint64_t> value(s.counters.size(), 0);
        for (uint32_t t = 0; t < n_streams; ++t)
            for (uint32_t p = 0; p < uint8_t(pcs[t]); ++p) {
                const Instruction& i = *ins[id(t, p)];
                for (uint32_t k = 0; k < i.n_signals; ++k) value[i.signals[k].counter] += i.signals[k].delta;
            }
        bool any = false, done = true;
        for (uint32_t t = 0; t < n_streams; ++t) {
            const uint32_t pc = uint8_t(pcs[t]);
            if (pc >= length[t]) continue;
            done = false;
            const uint32_t y = id(t, pc), step = pc / uint32_t(s.streams[t].size());
            bool enabled = true;
            for (uint32_t w = 0; w < ins[y]->n_waits; ++w) {
                const Wait& wt = ins[y]->waits[w];
                enabled =
                    enabled && value[wt.counter] >= uint64_t(step) * s.counters[wt.counter].step_total + wt.target;
            }
            if (!enabled) continue;
            any = true;
            for (uint32_t u = 0; u < n_streams && !out.race; ++u)
                for (uint32_t p = uint8_t(pcs[u]); p < length[u]; ++p) {
                    const uint32_t x = id(u, p);
                    if (order[x] < order[y] && conflicts[x][y]) {
                        out.race = true;
                        out.example = fmt::format("sm {} position {} can start before sm {} position {}", t, pc, u, p);
                        break;
                    }
                }
            std::string next = pcs;
            next[t] = char(pc + 1);
            if (seen.insert(next).second) todo.push_back(next);
        }
        if (!any && !done) out.deadlock = true;
    }
    return out;
}

}  // namespace mk::test

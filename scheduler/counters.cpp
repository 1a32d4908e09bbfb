// Counter derivation (see counters.hpp).
#include "scheduler/counters.hpp"

#include <map>

#include "models/error.hpp"

namespace mk {

namespace {

struct Placement {
    uint32_t sm = 0, index = 0;
};

// Waits each node needs after dropping the ones its stream already implies.
std::vector<std::vector<GroupDep>> needed_waits(const Graph& graph, const Assignment& assignment,
                                                const std::vector<Placement>& where) {
    std::vector<std::vector<uint32_t>> members(graph.groups.size());
    for (uint32_t i = 0; i < graph.nodes.size(); ++i) members[graph.nodes[i].group].push_back(i);

    std::vector<std::vector<GroupDep>> needed(graph.nodes.size());
    for (uint32_t sm = 0; sm < assignment.size(); ++sm) {
        // Groups this stream has already waited for completely (this step, or the previous one), or run entirely itself.
        std::vector<bool> done(graph.groups.size(), false), done_previous(graph.groups.size(), false);
        for (uint32_t node_id : assignment[sm]) {
            for (const GroupDep& dep : graph.nodes[node_id].deps) {
                const auto& m = members[dep.group];
                bool all_here = true;
                for (uint32_t member : m) all_here = all_here && where[member].sm == sm;
                if (dep.previous_step) {
                    // The previous step's members ran on this stream before this step started.
                    if (all_here || done_previous[dep.group]) continue;
                    done_previous[dep.group] = true;
                } else {
                    bool all_before = all_here;
                    for (uint32_t member : m) all_before = all_before && where[member].index < where[node_id].index;
                    if (all_before || done[dep.group]) continue;
                    done[dep.group] = true;
                }
                needed[node_id].push_back(dep);
            }
        }
    }
    return needed;
}

}  // namespace

Schedule build_schedule(const Graph& graph, const Assignment& assignment, const Target& target) {
    std::vector<Placement> where(graph.nodes.size(), {UINT32_MAX, 0});
    for (uint32_t sm = 0; sm < assignment.size(); ++sm)
        for (uint32_t k = 0; k < assignment[sm].size(); ++k) {
            uint32_t id = assignment[sm][k];
            if (id >= graph.nodes.size() || where[id].sm != UINT32_MAX) fail("schedule: node {} assigned twice or out of range", id);
            where[id] = {sm, k};
        }
    for (uint32_t i = 0; i < graph.nodes.size(); ++i)
        if (where[i].sm == UINT32_MAX) fail("schedule: node {} was not assigned", i);

    const auto needed = needed_waits(graph, assignment, where);

    Schedule s;
    static_cast<ScheduleLayout&>(s) = graph;
    s.target = target;

    // Counters only for groups somebody waits on; each member signals +1, so step_total = members.
    std::map<uint32_t, uint16_t> counter_of;
    for (const auto& waits : needed)
        for (const GroupDep& dep : waits)
            if (!counter_of.count(dep.group)) {
                if (s.counters.size() >= 0xffff) fail("schedule: more than 65535 counters");
                counter_of[dep.group] = uint16_t(s.counters.size());
                s.counters.push_back({graph.groups[dep.group].name, graph.groups[dep.group].n_members});
            }

    s.streams.resize(assignment.size());
    for (uint32_t sm = 0; sm < assignment.size(); ++sm) {
        for (uint32_t node_id : assignment[sm]) {
            const GraphNode& node = graph.nodes[node_id];
            Instruction ins = node.ins;
            const auto& waits = needed[node_id];
            if (waits.size() > size_t(kMaxWaits)) fail("schedule: node {} needs {} waits (max {})", node_id, waits.size(), kMaxWaits);
            ins.n_waits = uint8_t(waits.size());
            for (size_t w = 0; w < waits.size(); ++w) {
                const GraphGroup& g = graph.groups[waits[w].group];
                ins.waits[w] = {counter_of.at(waits[w].group), uint16_t(waits[w].operand),
                                waits[w].previous_step ? 0u : g.n_members};
            }
            if (auto it = counter_of.find(node.group); it != counter_of.end()) {
                ins.n_signals = 1;
                ins.signals[0] = {it->second, 1};
            }
            s.streams[sm].push_back(ins);
        }
    }
    return s;
}

}  // namespace mk

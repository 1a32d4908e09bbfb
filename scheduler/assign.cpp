// Round-robin and critical-path list scheduling.
#include "scheduler/assign.hpp"

#include <algorithm>
#include <numeric>

#include "models/error.hpp"

namespace mk {

Policy parse_policy(const std::string& name) {
    if (name == "round-robin") return Policy::round_robin;
    if (name == "critical-path") return Policy::critical_path;
    fail("unknown policy '{}' (known: round-robin, critical-path)", name);
}

std::string policy_name(Policy policy) { return policy == Policy::round_robin ? "round-robin" : "critical-path"; }

double node_duration_ns(const Cost& cost, const Target& target) {
    const double per_sm_bytes_per_ns = target.bandwidth_gbs / target.n_sms;  // GB/s == bytes/ns
    const double load = double(cost.weight_bytes + cost.activation_bytes) / per_sm_bytes_per_ns;
    const double compute = double(cost.flops) / target.sm_gflops;
    return target.instruction_ns + std::max(load, compute) + double(cost.link_bytes) / target.link_gbs;
}

double dependency_ns(const Target& target, uint32_t from_sm, uint32_t to_sm) {
    if (from_sm == to_sm) return 0.0;
    return from_sm / target.n_sms == to_sm / target.n_sms ? target.hop_ns : target.link_ns;
}

namespace {

// Rank k's nodes go to SMs [k * n_sms, (k + 1) * n_sms).
Assignment assign_round_robin(const Graph& graph, const Target& target) {
    Assignment streams(size_t(target.n_sms) * graph.tp_size);
    std::vector<uint32_t> dealt(graph.tp_size, 0);
    for (uint32_t i = 0; i < graph.nodes.size(); ++i) {
        const uint32_t rank = graph.nodes[i].rank;
        streams[rank * target.n_sms + dealt[rank]++ % target.n_sms].push_back(i);
    }
    return streams;
}

// Per group: the latest finish among its members and the SM it ran on, plus the latest finish on
// any other SM, so "when is this group ready on SM s" costs O(1) instead of a scan of the members.
// A group's members all run on one rank; `hop` is the latency from that rank to the waiter's.
struct GroupFinish {
    double best = 0.0, second = 0.0;  // latest finish; latest finish on an SM other than best_sm
    uint32_t best_sm = UINT32_MAX;
    void add(double finish, uint32_t sm) {
        if (sm == best_sm) {
            best = std::max(best, finish);
        } else if (finish >= best) {
            second = best;
            best = finish;
            best_sm = sm;
        } else {
            second = std::max(second, finish);
        }
    }
    double ready_on(uint32_t sm, double hop) const {
        if (best_sm == UINT32_MAX) return 0.0;
        return sm == best_sm ? std::max(best, second + hop) : best + hop;
    }
};

Assignment assign_critical_path(const Graph& graph, const Target& target) {
    const size_t n = graph.nodes.size();
    std::vector<double> duration(n);
    for (size_t i = 0; i < n; ++i) duration[i] = node_duration_ns(graph.nodes[i].cost, target);

    // Upward rank: the longest path from a node to the end of the step, hops included.
    std::vector<std::vector<uint32_t>> members(graph.groups.size());
    for (uint32_t i = 0; i < n; ++i) members[graph.nodes[i].group].push_back(i);
    std::vector<double> group_rank(graph.groups.size(), 0.0), rank(n, 0.0);
    // The rank whose nodes signal each group (kMixed: several; a transfer group's members are the peers).
    constexpr uint32_t kUnset = UINT32_MAX - 1, kMixed = UINT32_MAX;
    std::vector<uint32_t> dep_rank(graph.groups.size(), kUnset);
    for (const GraphNode& node : graph.nodes)
        dep_rank[node.group] = dep_rank[node.group] == kUnset || dep_rank[node.group] == node.rank ? node.rank : kMixed;
    for (size_t i = n; i-- > 0;) {  // seq order is topological, so walk it backwards
        const GraphNode& node = graph.nodes[i];
        rank[i] = duration[i] + group_rank[node.group];
        for (const GroupDep& dep : node.deps) {
            if (dep.previous_step) continue;
            const bool remote = node.rank != dep_rank[dep.group];
            group_rank[dep.group] = std::max(group_rank[dep.group], rank[i] + (remote ? target.link_ns : target.hop_ns));
        }
    }
    // Groups waited on by several nodes: a dep's rank is the max over all waiters, computed above.
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    // Decreasing rank is a topological order (a predecessor's rank exceeds its successors'); seq breaks ties.
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return rank[a] > rank[b]; });

    Assignment streams(size_t(target.n_sms) * graph.tp_size);
    std::vector<double> sm_free(streams.size(), 0.0);
    std::vector<GroupFinish> finish(graph.groups.size());
    for (uint32_t i : order) {
        const GraphNode& node = graph.nodes[i];
        const uint32_t first = node.rank * target.n_sms;
        uint32_t best_sm = first;
        double best_end = 0.0;
        for (uint32_t sm = first; sm < first + target.n_sms; ++sm) {
            double start = sm_free[sm];
            for (const GroupDep& dep : node.deps) {
                if (dep.previous_step) continue;
                const double hop = dep_rank[dep.group] == node.rank ? target.hop_ns : target.link_ns;
                start = std::max(start, finish[dep.group].ready_on(sm, hop));
            }
            const double end = start + duration[i];
            if (sm == first || end < best_end) {
                best_end = end;
                best_sm = sm;
            }
        }
        sm_free[best_sm] = best_end;
        finish[node.group].add(best_end, best_sm);
        streams[best_sm].push_back(i);
    }
    return streams;
}

}  // namespace

Assignment assign(const Graph& graph, const Target& target, Policy policy) {
    if (target.n_sms == 0) fail("assign: the target has no SMs");
    return policy == Policy::round_robin ? assign_round_robin(graph, target) : assign_critical_path(graph, target);
}

}  // namespace mk

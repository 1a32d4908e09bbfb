// Assignment policies: which SM runs each graph node, and in what order. Every policy emits each
// stream as a subsequence of one topological order of the graph, so in-order streams cannot deadlock.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/graph.hpp"

namespace mk {

enum class Policy { round_robin, critical_path };
Policy parse_policy(const std::string& name);  // "round-robin" | "critical-path"; throws naming the unknown one
std::string policy_name(Policy policy);

// Node ids per SM (n_sms * tp streams, rank by rank), in execution order.
using Assignment = std::vector<std::vector<uint32_t>>;

// The cost model shared with the simulator: the time one node takes on one SM, in nanoseconds.
double node_duration_ns(const Cost& cost, const Target& target);
// How long after a signal on SM `from_sm` a waiter on `to_sm` sees it: 0 on the same SM, hop_ns within a
// rank, link_ns across ranks (streams [k * n_sms, (k + 1) * n_sms) are rank k's).
double dependency_ns(const Target& target, uint32_t from_sm, uint32_t to_sm);

Assignment assign(const Graph& graph, const Target& target, Policy policy);

}  // namespace mk

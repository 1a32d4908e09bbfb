// Turns an assignment into a schedule: one counter per graph group that some instruction must
// wait for, waits with per-step (epoch-relative) targets, and signals. Waits already implied by
// the stream order or by an earlier wait on the same stream are dropped.
#pragma once
#include "scheduler/assign.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

Schedule build_schedule(const Graph& graph, const Assignment& assignment, const Target& target);

}  // namespace mk

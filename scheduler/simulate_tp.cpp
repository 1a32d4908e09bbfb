// The tensor-parallel summary of a simulated step: per-rank totals, and the exchange's cost measured
// against the same streams with a free exchange (exposed) and against the time it is in flight (hidden).
#include <algorithm>

#include "instructions/registry.hpp"
#include "scheduler/simulate.hpp"

namespace mk {

namespace {

// The measure of a union of half-open intervals.
double union_ns(std::vector<std::pair<double, double>> spans) {
    std::sort(spans.begin(), spans.end());
    double total = 0.0, begin = 0.0, end = 0.0;
    bool open = false;
    for (const auto& [b, e] : spans) {
        if (open && b <= end) {
            end = std::max(end, e);
            continue;
        }
        if (open) total += end - begin;
        begin = b, end = e, open = true;
    }
    return open ? total + end - begin : total;
}

}  // namespace

double ExchangeSummary::in_flight_ns() const {
    double most = 0.0;
    for (const RankTotals& r : ranks) most = std::max(most, r.in_flight_ns);
    return most;
}

double ExchangeSummary::hidden() const {
    const double flight = in_flight_ns();
    return flight > 0.0 ? 1.0 - exposed_ns() / flight : 0.0;
}

ExchangeSummary summarize_exchange(const Schedule& s, const Simulation& sim, const SimOptions& options) {
    ExchangeSummary out;
    const uint32_t n_ranks = std::max(1u, s.tp_size);
    const double latency_ns = s.target.link_ns - s.target.hop_ns;  // a cross-rank signal beyond an on-chip one
    out.ranks.resize(n_ranks);
    std::vector<std::vector<std::pair<double, double>>> flights(n_ranks);
    for (uint32_t k = 0; k < n_ranks; ++k) out.ranks[k].first_sm = k * s.target.n_sms;
    for (size_t sm = 0; sm < s.streams.size(); ++sm) {
        const uint32_t k = std::min(s.rank_of_stream(sm), n_ranks - 1);
        RankTotals& r = out.ranks[k];
        r.n_sms++;
        r.n_instructions += s.streams[sm].size();
        r.busy_ns += sim.sms[sm].busy_ns;
        for (size_t i = 0; i < s.streams[sm].size(); ++i) {
            const Instruction& ins = s.streams[sm][i];
            const OpInfo& op = op_info(ins.opcode);
            const Cost cost = op.cost(ins, s.dims, s.weights.data());
            r.weight_bytes += cost.weight_bytes;
            if (!op.effects(ins).writes_peer()) continue;
            const SimEvent& e = sim.timeline[sm][i];
            r.n_transfers++;
            r.sent_bytes += cost.link_bytes;
            flights[k].push_back({e.start_ns, e.end_ns + latency_ns});
        }
    }
    for (uint32_t k = 0; k < n_ranks; ++k) out.ranks[k].in_flight_ns = union_ns(std::move(flights[k]));
    SimOptions free = options;
    free.free_exchange = true;
    out.step_ns = sim.makespan_ns;
    out.free_step_ns = simulate(s, free).makespan_ns;
    return out;
}

}  // namespace mk

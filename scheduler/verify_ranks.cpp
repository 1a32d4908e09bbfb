// The rank check of a tensor-parallel schedule: what lets the combined schedule run as one program per
// GPU, with transfers as the only writes into another GPU's memory (and no instruction reading one), and
// every counter living on one rank: waited on only there, signalled only there or by a transfer to it.
#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "instructions/registry.hpp"
#include "scheduler/verify_internal.hpp"

namespace mk::verify_detail {

namespace {

// Each rank holds its own counters (the CPU and one GPU keep one array, which this makes equivalent), so a
// counter's waiters must share a rank and its signals must come from there or from a transfer to there.
void check_counter_owners(Context& ctx) {
    const Schedule& s = ctx.schedule;
    std::vector<std::optional<uint32_t>> owner(s.counters.size());
    std::vector<uint32_t> first_waiter(s.counters.size(), 0);
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const uint32_t rank = s.rank_of_stream(ctx.stream_of[f]);
        for (const Wait& w : ctx.waits[f]) {
            if (w.counter >= owner.size()) continue;  // the structure check reports it
            if (!owner[w.counter]) {
                owner[w.counter] = rank;
                first_waiter[w.counter] = f;
            } else if (*owner[w.counter] != rank) {
                ctx.add(VerifyCheck::ranks, fmt::format("ranks: {} is waited on by {} (rank {}) and by {} (rank {})",
                                                        ctx.counter_label(w.counter), ctx.label(first_waiter[w.counter]),
                                                        *owner[w.counter], ctx.label(f), rank));
            }
        }
    }
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const Instruction& ins = *ctx.ins[f];
        const uint32_t rank = s.rank_of_stream(ctx.stream_of[f]);
        const Effects effects = op_info(ins.opcode).effects(ins);
        const bool transfer = effects.writes_peer();
        const uint32_t target = transfer ? effects.peer_rank : rank;
        for (uint32_t g = 0; g < std::min<uint32_t>(ins.n_signals, kMaxSignals); ++g) {
            const uint16_t c = ins.signals[g].counter;
            if (c < owner.size() && owner[c] && *owner[c] != target)
                ctx.add(VerifyCheck::ranks,
                        fmt::format("ranks: {} on rank {} signals {}, which rank {} waits on ({}){}", ctx.label(f), rank,
                                    ctx.counter_label(c), *owner[c], ctx.label(first_waiter[c]),
                                    transfer ? fmt::format("; the transfer goes to rank {}", target)
                                             : "; only a transfer may signal another rank's counter"));
        }
    }
}

}  // namespace

void check_ranks(Context& ctx) {
    const Schedule& s = ctx.schedule;
    if (s.tp_size <= 1) return;
    const uint64_t region = s.rank_arena_bytes;
    const uint32_t layers = s.dims.n_layers / s.tp_size;  // per rank
    if (region == 0 || region * s.tp_size != s.arena_bytes || layers * s.tp_size != s.dims.n_layers) {
        ctx.add(VerifyCheck::ranks, fmt::format("ranks: {} ranks do not split an arena of {} bytes into regions of {} "
                                                "or {} layers evenly",
                                                s.tp_size, s.arena_bytes, region, s.dims.n_layers));
        return;
    }
    check_counter_owners(ctx);
    const uint64_t kv_slots = uint64_t(layers) * s.dims.kv_dim();  // KV element slots per rank
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const Instruction& ins = *ctx.ins[f];
        const OpInfo& op = op_info(ins.opcode);
        const uint32_t rank = s.rank_of_stream(ctx.stream_of[f]);
        auto check = [&](uint64_t begin, uint64_t end, uint64_t per_rank, uint32_t owner, const char* what) {
            const uint64_t first = begin / per_rank, last = (end - 1) / per_rank;
            if (end > begin && (first != owner || last != owner))
                ctx.add(VerifyCheck::ranks, fmt::format("ranks: {} runs on rank {} but {} [{}, {}) of rank {}{}",
                                                        ctx.label(f), rank, what, begin, end, first,
                                                        last != first ? fmt::format("..{}", last) : ""));
        };
        const Effects effects = op.effects(ins);
        const bool transfer = effects.writes_peer();
        const uint32_t peer = transfer ? effects.peer_rank : rank;
        if (transfer && (peer == rank || peer >= s.tp_size))
            ctx.add(VerifyCheck::ranks, fmt::format("ranks: {} on rank {} sends to rank {}", ctx.label(f), rank, peer));
        for (const Access& a : op.accesses(ins, s.dims)) {
            if (a.space == Space::arena)
                check(a.begin, a.end, region, transfer && a.write ? peer : rank, a.write ? "writes arena" : "reads arena");
            else
                check(a.begin, a.end, kv_slots, rank, "touches the KV slots");
        }
        for (uint32_t id : op.weights(ins))
            if (id >= uint32_t(GlobalWeight::count)) {
                const uint32_t layer = (id - uint32_t(GlobalWeight::count)) / uint32_t(LayerWeight::count);
                check(layer, layer + 1, layers, rank, "reads the weights of layer");
            }
    }
}

}  // namespace mk::verify_detail

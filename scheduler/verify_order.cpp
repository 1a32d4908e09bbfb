// Races and the cross-step fence, decided on exact happens-before over two unrolled steps.
//
// X happens before Y when no execution starts Y before X has finished. For each stream s and a limit
// L growing from 0, greedy progress with s confined to its first L positions reaches every
// instruction that can start without s's L-th; vc[s][Y] is the smallest L at which Y starts, so the
// instruction at position i of s happens before Y exactly when i < vc[s][Y] (a vector clock).
// Raising L only adds progress, so one incremental run per stream fills a row: O(streams x nodes).
//
// Why two steps are enough: the fence check proves no next-step signal can meet a wait early, so
// each wait is met by its own step's and earlier signals; every step then starts from the same state
// once the previous ones are done, and step e+1 against step e behaves like step 1 against step 0
// (happens-before of step e against e+1 is read off step 0 against step 1).
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "instructions/registry.hpp"
#include "scheduler/verify_progress.hpp"

namespace mk::verify_detail {

namespace {

constexpr uint32_t kNever = UINT32_MAX;
constexpr uint32_t kNone = UINT32_MAX;

class HappensBefore {
public:
    explicit HappensBefore(const Context& ctx) : ctx_(ctx), width_(Progress::kSteps * ctx.n) {
        vc_.assign(size_t(ctx.offset.size()) * width_, kNever);
        Progress run(ctx);
        for (uint32_t s = 0; s < ctx.offset.size(); ++s) {
            uint32_t* row = &vc_[size_t(s) * width_];
            const uint32_t length = run.length(s);
            uint32_t limit = 0;
            // s's own instructions: the position, once reachable at all (an unreachable one never races).
            auto record = [&](uint32_t sm, uint32_t p, uint32_t node) {
                if (sm == s)
                    row[node] = p;
                else if (row[node] == kNever)
                    row[node] = limit;
            };
            run.reset([&](uint32_t sm) { return sm == s ? 0 : run.length(sm); });
            run.run(record);
            for (limit = 1; limit <= length; ++limit) {
                if (run.pc(s) < limit - 1) break;  // s is stuck on a wait: a higher limit changes nothing
                run.raise_limit(s, limit);
                run.run(record);
            }
        }
    }
    // Window position of a window node in its stream.
    uint32_t position(uint32_t node) const {
        const uint32_t flat = node % ctx_.n;
        return (node / ctx_.n) * ctx_.stream_size(ctx_.stream_of[flat]) + ctx_.index_of(flat);
    }
    bool before(uint32_t p, uint32_t q) const {
        return vc_[size_t(ctx_.stream_of[p % ctx_.n]) * width_ + q] > position(p);
    }

private:
    const Context& ctx_;
    uint32_t width_;
    std::vector<uint32_t> vc_;  // stream-major rows over window nodes
};

// Spaces of the sweep: the arena's bytes, then each KV cache's slots once per row class. Rows are
// symbolic: with positions p < p' of steps 0 and 1, a slot's rows split into 5 classes.
constexpr uint32_t kRowClasses = 5;
const char* const kRowText[kRowClasses] = {"rows before step e's pos", "row pos of step e",
                                           "rows between the pos of step e and e+1", "row pos of step e+1",
                                           "rows past the pos of step e+1"};

// Row classes [first, last) an access touches in `step`.
std::pair<uint32_t, uint32_t> row_classes(PosMode pos, uint32_t step) {
    switch (pos) {
        case PosMode::at_pos: return step == 0 ? std::pair{1u, 2u} : std::pair{3u, 4u};
        case PosMode::upto_pos: return step == 0 ? std::pair{0u, 2u} : std::pair{0u, 4u};
        default: return {0u, kRowClasses};
    }
}

// A KV space's coordinates are slot * positions + k (RaceSweep::apply_kv).
std::string region_text(uint32_t space, uint64_t begin, uint64_t end, uint64_t positions) {
    if (space == 0) return fmt::format("arena [{}, {})", begin, end);
    const uint32_t cache = (space - 1) / kRowClasses, cls = (space - 1) % kRowClasses;
    const std::string rows = positions == 1 || (begin % positions == 0 && end % positions == 0)
                                 ? std::string(kRowText[cls])
                                 : fmt::format("{} + {}", kRowText[cls], begin % positions);
    return fmt::format("{} slots [{}, {}) {}", cache == 0 ? "k_cache" : "v_cache", begin / positions,
                       (end + positions - 1) / positions, rows);
}

// The reads since a write, as nodes of a trie shared by every segment: appending a reader to a list gives the
// same id wherever the same readers came in the same order, so the (T, d_model) rows of a prefill chunk, split
// into thousands of segments by the row blocks that write them, share one list per reading history.
class ReadLists {
public:
    static constexpr uint32_t kEmpty = 0;
    ReadLists() : nodes_(1, Node{kEmpty, kNone}) {}
    uint32_t append(uint32_t list, uint32_t reader) {
        if (list != kEmpty && nodes_[list].reader == reader) return list;
        const uint64_t key = uint64_t(list) << 32 | reader;
        if (key == last_key_) return last_child_;  // the previous segment's list, usually
        const auto [it, added] = child_.try_emplace(key, uint32_t(nodes_.size()));
        if (added) nodes_.push_back({list, reader});
        last_key_ = key;
        last_child_ = it->second;
        return last_child_;
    }
    // f(id, reader) for each read of `list`, latest first, until f returns false. A list's id is its latest read's:
    // the ids passed are those of `list` and of each shorter list it extends.
    template <typename F>
    void walk(uint32_t list, F&& f) const {
        for (; list != kEmpty && f(list, nodes_[list].reader); list = nodes_[list].parent) {
        }
    }

private:
    struct Node {
        uint32_t parent, reader;
    };
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, uint32_t> child_;
    uint64_t last_key_ = UINT64_MAX;
    uint32_t last_child_ = kEmpty;
};

// The latest write and the reads since, per elementary range of one space.
struct Segment {
    uint64_t end = 0;
    uint32_t last_write = kNone;
    uint32_t reads = ReadLists::kEmpty;
};

class RaceSweep {
public:
    RaceSweep(Context& ctx, const HappensBefore& hb) : ctx_(ctx), hb_(hb), spaces_(1 + 2 * kRowClasses) {}

    // Walks both steps in sequential order. Checking each access only against the latest write and
    // (for a write) the reads since is enough: happens-before is transitive.
    void run() {
        std::vector<uint32_t> order(ctx_.n);
        for (uint32_t f = 0; f < ctx_.n; ++f) order[ctx_.ins[f]->seq] = f;
        std::vector<std::vector<Access>> accesses(ctx_.n);
        for (uint32_t f = 0; f < ctx_.n; ++f) {
            accesses[f] = op_info(ctx_.ins[f]->opcode).accesses(*ctx_.ins[f], ctx_.schedule.dims);
            ctx_.report.stats.n_accesses += accesses[f].size();
            for (const Access& a : accesses[f])
                if (a.space != Space::arena) step_positions_ = std::max<uint64_t>(step_positions_, a.pos_offset + a.n_pos);
        }
        for (uint32_t step = 0; step < Progress::kSteps; ++step)
            for (uint32_t f : order)
                for (const Access& a : accesses[f]) {
                    if (a.begin >= a.end) continue;
                    if (ctx_.stopped) return;
                    const uint32_t node = step * ctx_.n + f;
                    if (a.space == Space::arena) {
                        apply(0, a.begin, a.end, node, a.write);
                        continue;
                    }
                    const uint32_t base = 1 + (a.space == Space::k_cache ? 0 : kRowClasses);
                    const auto [first, last] = row_classes(a.pos, step);
                    for (uint32_t cls = first; cls < last; ++cls) apply_kv(base + cls, a, node);
                }
    }

private:
    using Map = std::map<uint64_t, Segment>;  // by begin; segments never overlap

    // A KV space's coordinate is slot * step_positions_ + k: slot's row pos + k of the step's positions (a
    // prefill chunk's token blocks write disjoint rows of the same slots). Other row classes, and accesses of
    // every step position, cover all k of their slots.
    void apply_kv(uint32_t space, const Access& a, uint32_t node) {
        const uint64_t P = step_positions_;
        if (a.pos != PosMode::at_pos || (a.pos_offset == 0 && a.n_pos >= P)) {
            apply(space, a.begin * P, a.end * P, node, a.write);
            return;
        }
        for (uint64_t slot = a.begin; slot < a.end && !ctx_.stopped; ++slot)
            apply(space, slot * P + a.pos_offset, slot * P + a.pos_offset + a.n_pos, node, a.write);
    }

    void split(Map& map, uint64_t at) {
        auto it = map.upper_bound(at);
        if (it == map.begin()) return;
        --it;
        if (it->first < at && it->second.end > at) {
            Segment right = it->second;
            it->second.end = at;
            map.emplace_hint(std::next(it), at, std::move(right));
        }
    }

    void apply(uint32_t space, uint64_t begin, uint64_t end, uint32_t node, bool write) {
        if (node != checked_for_) {  // a node's accesses come one after another
            checked_for_ = node;
            ++epoch_;
        }
        Map& map = spaces_[space];
        split(map, begin);
        split(map, end);
        uint64_t at = begin;
        auto it = map.lower_bound(begin);
        while (at < end && !ctx_.stopped) {
            if (it == map.end() || it->first > at) {
                const uint64_t gap_end = it == map.end() ? end : std::min(end, it->first);
                it = map.emplace_hint(it, at, Segment{gap_end, kNone, ReadLists::kEmpty});
            }
            Segment& seg = it->second;
            // Each earlier write and read is checked against this node once: the answer (happens-before) is the
            // same on every segment; the first segment a race is found on names the region. A read list whose
            // id was checked has had every shorter list it extends checked too, so a walk stops there.
            if (seg.last_write != kNone && seg.last_write != node && first_time(write_checked_, seg.last_write))
                check(seg.last_write, true, node, write, space, at, seg.end);
            if (write) {
                reads_.walk(seg.reads, [&](uint32_t id, uint32_t r) {
                    if (!first_time(list_checked_, id)) return false;
                    if (r != node) check(r, false, node, true, space, at, seg.end);
                    return true;
                });
                seg.last_write = node;
                seg.reads = ReadLists::kEmpty;
            } else {
                seg.reads = reads_.append(seg.reads, node);
            }
            at = seg.end;
            ++it;
        }
    }

    // Whether `id` is seen for the first time since the current node's accesses began (stamps by epoch).
    bool first_time(std::vector<uint32_t>& stamps, uint32_t id) {
        if (id >= stamps.size()) stamps.resize(std::max<size_t>(id + 1, 2 * stamps.size()), 0);
        if (stamps[id] == epoch_) return false;
        stamps[id] = epoch_;
        return true;
    }

    // p comes before q in sequential order and they conflict on [begin, end) of `space`.
    void check(uint32_t p, bool p_writes, uint32_t q, bool q_writes, uint32_t space, uint64_t begin, uint64_t end) {
        ctx_.report.stats.n_conflicts++;
        if (hb_.before(p, q)) return;
        const uint32_t fp = p % ctx_.n, fq = q % ctx_.n;
        const bool cross = p / ctx_.n != q / ctx_.n;
        if (!reported_.insert((uint64_t(fp) * ctx_.n + fq) * 2 + cross).second) return;
        const std::string edge = fmt::format("sm {} #{} -> sm {} #{}{}", ctx_.stream_of[fp], ctx_.index_of(fp),
                                             ctx_.stream_of[fq], ctx_.index_of(fq), cross ? " of the next step" : "");
        ctx_.add(VerifyCheck::race,
                 fmt::format("race: {} {} {}{} but {} {} it {} and no wait orders them (missing edge {})",
                             ctx_.label(fq), q_writes ? "writes" : "reads", region_text(space, begin, end, step_positions_),
                             cross ? " in step e+1" : "", ctx_.label(fp), p_writes ? "writes" : "reads",
                             cross ? "in step e" : "earlier in step order", edge));
    }

    Context& ctx_;
    const HappensBefore& hb_;
    uint64_t step_positions_ = 1;  // the most positions a KV access spans from pos (a prefill chunk's T)
    std::vector<Map> spaces_;
    ReadLists reads_;
    // The writes and read-list ids already checked against the node whose accesses are being applied.
    uint32_t checked_for_ = kNone, epoch_ = 0;
    std::vector<uint32_t> write_checked_, list_checked_;  // by node / list id: the epoch it was checked in
    std::unordered_set<uint64_t> reported_;
};

// A wait of step e may be met early only with next-step signals, from other streams (its own come
// after it). Such a signal is harmless when it cannot start before the wait finishes, or when it
// must follow the last step-e signal of every stream but the waiter's: the waiter's own earlier
// signals are in by then too, so the counter holds all it can honestly hold before the wait, which
// meets the target in a schedule that does not deadlock.
void check_fence(Context& ctx, const HappensBefore& hb) {
    struct Signaller {
        uint32_t sm, first, last;  // flat index of the stream's first and last signal to the counter
        uint32_t late[2];          // up to two other streams' last signals that need not precede `first` next step
    };
    std::vector<std::vector<Signaller>> signallers(ctx.step_total.size());
    for (uint32_t f = 0; f < ctx.n; ++f) {
        const Instruction& ins = *ctx.ins[f];
        for (uint32_t k = 0; k < ins.n_signals; ++k) {
            if (!ins.signals[k].delta) continue;
            auto& list = signallers[ins.signals[k].counter];
            if (list.empty() || list.back().sm != ctx.stream_of[f])
                list.push_back({ctx.stream_of[f], f, f, {kNone, kNone}});
            else
                list.back().last = f;
        }
    }
    for (auto& list : signallers)
        for (Signaller& u : list) {
            uint32_t n_late = 0;
            for (const Signaller& v : list)
                if (v.sm != u.sm && n_late < 2 && !hb.before(v.last, ctx.n + u.first)) u.late[n_late++] = v.last;
        }
    for (uint32_t f = 0; f < ctx.n && !ctx.stopped; ++f) {
        const uint32_t sm = ctx.stream_of[f];
        std::vector<uint32_t> seen;
        for (const Wait& w : ctx.waits[f]) {
            if (std::find(seen.begin(), seen.end(), w.counter) != seen.end()) continue;
            seen.push_back(w.counter);
            uint32_t bad = kNone, late = kNone, n_bad = 0;
            for (const Signaller& u : signallers[w.counter]) {
                if (u.sm == sm) continue;
                ctx.report.stats.n_fence_checks++;
                if (hb.before(f, ctx.n + u.first)) continue;
                uint32_t other = kNone;  // a late signaller other than the waiter's stream
                for (uint32_t v : u.late)
                    if (v != kNone && ctx.stream_of[v] != sm && other == kNone) other = v;
                if (other == kNone) continue;
                if (n_bad++ == 0) bad = u.first, late = other;
            }
            if (n_bad == 0) continue;
            ctx.add(VerifyCheck::fence,
                    fmt::format(
                        "fence: {} waits {} >= {} in step e, but {}{} can signal it in step e+1 before that wait "
                        "passes and before {} signals it in step e, so a stream running ahead could meet the wait "
                        "early (missing edge sm {} #{} -> sm {} #{} of the next step, or sm {} #{} -> the same)",
                        ctx.label(f), ctx.counter_label(w.counter), w.target, ctx.label(bad),
                        n_bad > 1 ? fmt::format(" (and {} more)", n_bad - 1) : "", ctx.label(late), sm, ctx.index_of(f),
                        ctx.stream_of[bad], ctx.index_of(bad), ctx.stream_of[late], ctx.index_of(late)));
        }
    }
}

}  // namespace

void check_order(Context& ctx) {
    if (ctx.n == 0) return;
    const HappensBefore hb(ctx);
    RaceSweep(ctx, hb).run();
    if (!ctx.stopped) check_fence(ctx, hb);
}

}  // namespace mk::verify_detail

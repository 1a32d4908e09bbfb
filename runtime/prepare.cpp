// Validation and precomputation of a schedule for the CPU interpreter.
#include "runtime/prepare.hpp"

#include <algorithm>

#include "instructions/common/token_rows.hpp"
#include "models/error.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

namespace {

void check_weights(const Schedule& s, const ProgramMemory& memory) {
    if (!s.weights.empty() && memory.weights == nullptr) fail("schedule: the program gives no weights table");
    for (uint32_t id = 0; id < s.weights.size(); ++id) {
        const WeightFormat& f = s.weights[id];
        if (!f.present()) continue;
        const WeightRef& w = memory.weights[id];
        if (w.data == nullptr || w.dtype != DType(f.dtype) || w.rows != f.rows || w.cols != f.cols ||
            w.row_bytes != f.row_bytes)
            fail("schedule: weight {} is expected as dtype {} [{}, {}] ({} bytes a row), the program has dtype {} "
                 "[{}, {}] ({} bytes a row{})",
                 id, f.dtype, f.rows, f.cols, f.row_bytes, uint32_t(w.dtype), w.rows, w.cols, w.row_bytes,
                 w.data ? "" : ", no data");
    }
}

void check_access(const Schedule& s, const ProgramMemory& memory, const Access& a, bool detect_races) {
    const char* what = a.write ? "writes" : "reads";
    if (a.begin > a.end) fail("{} a reversed region [{}, {})", what, a.begin, a.end);
    if (a.space == Space::arena) {
        if (a.end > s.arena_bytes) fail("{} arena bytes [{}, {}) past the arena's {} bytes", what, a.begin, a.end, s.arena_bytes);
        if (a.pos != PosMode::none) fail("{} the arena with a position mode", what);
        return;
    }
    const uint64_t n_slots = uint64_t(s.dims.n_layers) * s.dims.kv_dim();  // one slot per (layer, kv row)
    const char* cache = a.space == Space::k_cache ? "K" : "V";
    if (a.end > n_slots) fail("{} {} cache slots [{}, {}) past the cache's {} slots", what, cache, a.begin, a.end, n_slots);
    if ((a.space == Space::k_cache ? memory.k_cache : memory.v_cache) == nullptr || memory.ctx_len == 0)
        fail("{} the {} cache, but the program has none", what, cache);
    if (a.pos == PosMode::none) fail("{} the {} cache without a position mode", what, cache);
    if (detect_races && a.write && (a.pos != PosMode::at_pos || a.n_pos != 1))
        fail("writes the {} cache at more than the step's position, which the race detector does not track", cache);
}

// An MMA tile (page_plan.hpp) as the device code takes it (rows_math.cuh): up to 16 rows of a format it takes inside
// the weight's rows, in whole spans (mma_span_cols) of 16-byte pieces or in whole-row slices (one contiguous copy,
// 16-byte aligned: mma_row_align), as bulk copies need; a pass whose slice the plan's pages hold at once (more would
// leave the consumers waiting on a page that never fills).
bool mma_tile_fits(const Tile& tile, const WeightRef& w, uint32_t n_pages) {
    const uint32_t span = mma_span_cols(uint32_t(w.dtype));
    const bool whole_width = tile.col_begin == 0 && tile.n_cols == w.cols;
    const bool columns = whole_width ? tile.bytes % 16 == 0 && uint64_t(tile.row_begin) * w.row_bytes % 16 == 0
                                     : mma_spans_fit(uint32_t(w.dtype), w.cols, w.row_bytes) && tile.n_cols % span == 0 &&
                                           tile.col_begin % span == 0 && uint64_t(tile.col_begin) + tile.n_cols <= w.cols &&
                                           tile.piece_bytes() % 16 == 0 && tile.col_byte() % 16 == 0;
    return span && w.cols % 32 == 0 && columns && uint64_t(tile.row_begin) + tile.n_rows <= w.rows && tile.n_rows > 0 &&
           tile.n_rows <= kMmaGroupRows && tile.bytes == tile.n_rows * (w.row_bytes * tile.n_cols / w.cols) &&
           tile.pass_tiles >= 1 && tile.pass_tiles <= std::min(n_pages, kMmaMaxPassTiles);
}

void check_plan(const Schedule& s, const ProgramMemory& memory, const Instruction& ins, const PagePlan& plan,
                bool check_pages) {
    const Target& t = s.target;
    if (ins.n_pages > t.n_pages) fail("the instruction needs {} pages, the SM has {}", ins.n_pages, t.n_pages);
    if (plan.n_pages != ins.n_pages)
        fail("the instruction records {} pages, its page plan needs {}", ins.n_pages, plan.n_pages);
    if (!plan.tiles.empty() && plan.n_pages == 0) fail("the page plan has {} tiles but no pages", plan.tiles.size());
    std::vector<uint32_t> order = plan.release_order;
    std::sort(order.begin(), order.end());
    bool frees_each_once = order.size() == plan.n_pages;
    for (uint32_t k = 0; k < order.size(); ++k) frees_each_once = frees_each_once && order[k] == k;
    if (!frees_each_once) fail("the page plan's release order does not free each of its {} pages once", plan.n_pages);
    for (uint32_t i = 0; i < plan.tiles.size(); ++i) {
        const Tile& tile = plan.tiles[i];
        if (tile.weight >= s.weights.size() || !s.weights[tile.weight].present())
            fail("tile {} streams weight {}, which the schedule does not have", i, tile.weight);
        const WeightRef& w = memory.weights[tile.weight];
        const bool fits = tile.whole_rows() ? uint64_t(tile.row_begin) + tile.n_rows <= w.rows &&
                                                  tile.bytes == uint64_t(tile.n_rows) * w.row_bytes
                                            : mma_tile_fits(tile, w, plan.n_pages);
        if (!fits)
            fail("tile {} (rows [{}, {}) cols [{}, {}) of weight {}, {} bytes, pass of {}) does not match the weight's {} "
                 "rows of {} bytes (whole rows), nor an MMA tile the device takes", i, tile.row_begin,
                 tile.row_begin + tile.n_rows, tile.col_begin, tile.col_begin + tile.n_cols, tile.weight, tile.bytes,
                 tile.pass_tiles, w.rows, w.row_bytes);
        if (check_pages && tile.bytes > t.page_bytes)
            fail("tile {} is {} bytes, a page holds {}", i, tile.bytes, t.page_bytes);
    }
}

// Tensor parallel: each rank's arena region and KV layers may be a separate allocation (another GPU's), so
// an access outside the rank's own (a transfer's write: its peer's) would touch memory that is not there.
void check_rank_bounds(const Schedule& s, uint32_t rank, const Instruction& ins, const Access& a) {
    uint32_t owner = rank;
    const Effects effects = op_info(ins.opcode).effects(ins);
    if (effects.writes_peer() && a.write) {
        owner = effects.peer_rank;
        if (owner >= s.tp_size) fail("sends to rank {} of {}", owner, s.tp_size);
    }
    const uint64_t per_rank = a.space == Space::arena ? s.rank_arena_bytes
                                                      : uint64_t(s.dims.n_layers / s.tp_size) * s.dims.kv_dim();
    if (a.end > a.begin && (a.begin < owner * per_rank || a.end > (owner + 1) * per_rank))
        fail("{} {} [{}, {}) outside rank {}'s [{}, {})", a.write ? "writes" : "reads",
             a.space == Space::arena ? "arena bytes" : "KV slots", a.begin, a.end, owner, owner * per_rank,
             (owner + 1) * per_rank);
}

}  // namespace

PreparedSchedule prepare_schedule(const Schedule& s, const ProgramMemory& memory, bool check_pages,
                                  bool keep_accesses) {
    if (s.tp_size == 0 || s.streams.size() != uint64_t(s.target.n_sms) * s.tp_size)
        fail("schedule: {} streams for {} rank(s) of {} SMs", s.streams.size(), s.tp_size, s.target.n_sms);
    if (s.tp_size > 1 && (s.rank_arena_bytes * s.tp_size != s.arena_bytes || s.dims.n_layers % s.tp_size != 0))
        fail("schedule: {} ranks do not split {} arena bytes into regions of {} and {} layers evenly", s.tp_size,
             s.arena_bytes, s.rank_arena_bytes, s.dims.n_layers);
    if (s.arena_bytes > 0 && memory.arena == nullptr) fail("schedule: the program gives no arena");
    if (memory.rank_arenas)
        for (uint32_t r = 0; r < s.tp_size; ++r)
            if (memory.rank_arenas[r] == nullptr) fail("schedule: the program gives no arena for rank {}", r);
    check_weights(s, memory);

    const PlanInputs inputs = plan_inputs(s.target, s.weights.data());
    PreparedSchedule out;
    out.plans.reserve(s.n_instructions());
    std::vector<uint64_t> signalled(s.counters.size(), 0);
    for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
        for (uint32_t i = 0; i < s.streams[sm].size(); ++i) {
            const Instruction& ins = s.streams[sm][i];
            if (!is_valid_opcode(ins.opcode)) fail("schedule: sm {} #{}: unknown opcode {}", sm, i, ins.opcode);
            with_context(instruction_label(s, sm, i), [&] {
                if (ins.n_waits > kMaxWaits || ins.n_signals > kMaxSignals)
                    fail("{} waits and {} signals, at most {} and {}", ins.n_waits, ins.n_signals, kMaxWaits, kMaxSignals);
                for (uint32_t w = 0; w < ins.n_waits; ++w)
                    if (ins.waits[w].counter >= s.counters.size())
                        fail("waits on counter {}, the schedule has {}", ins.waits[w].counter, s.counters.size());
                for (uint32_t g = 0; g < ins.n_signals; ++g) {
                    if (ins.signals[g].counter >= s.counters.size())
                        fail("signals counter {}, the schedule has {}", ins.signals[g].counter, s.counters.size());
                    signalled[ins.signals[g].counter] += ins.signals[g].delta;
                }
                const OpInfo& op = op_info(ins.opcode);
                check_weight_ids(ins, s.weights);
                std::vector<Access> accesses = op.accesses(ins, s.dims);
                for (const Access& a : accesses) {
                    check_access(s, memory, a, keep_accesses);
                    if (s.tp_size > 1) check_rank_bounds(s, s.rank_of_stream(sm), ins, a);
                }
                if (keep_accesses) out.accesses.push_back(std::move(accesses));
                out.plans.push_back(op.page_plan(ins, inputs));
                check_plan(s, memory, ins, out.plans.back(), check_pages);
            });
        }
    }
    for (uint32_t c = 0; c < s.counters.size(); ++c)
        if (signalled[c] != s.counters[c].step_total)
            fail("schedule: counter {} '{}' receives {} a step, but its step_total is {}", c, s.counters[c].name,
                 signalled[c], s.counters[c].step_total);

    // Pointers are taken only now: `plans` no longer grows.
    uint32_t flat = 0;
    out.streams.resize(s.streams.size());
    for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
        out.streams[sm].reserve(s.streams[sm].size());
        for (const Instruction& ins : s.streams[sm]) {
            out.streams[sm].push_back({&ins, &op_info(ins.opcode), &out.plans[flat], flat});
            ++flat;
        }
    }
    return out;
}

}  // namespace mk

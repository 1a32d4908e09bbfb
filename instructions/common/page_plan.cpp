// Page plans for row-streaming ops.
#include "instructions/common/page_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "instructions/common/token_rows.hpp"
#include "models/error.hpp"

namespace mk {

namespace {
uint32_t rows_per_page(const PlanInputs& in, uint32_t weight) {
    const WeightFormat& format = in.weights[weight];
    if (format.row_bytes == 0) fail("page plan: weight {} has no rows", weight);
    if (format.row_bytes > in.page_bytes)
        fail("page plan: a row of weight {} is {} bytes, larger than a {}-byte page", weight, format.row_bytes,
             in.page_bytes);
    return uint32_t(std::min<uint64_t>(in.page_bytes / format.row_bytes, UINT32_MAX));  // never truncated to 0
}

// One tile per page of rows: a corrupt row range would otherwise ask for billions of tiles.
void check_rows(const PlanInputs& in, uint32_t weight, uint32_t row_begin, uint32_t n_rows) {
    if (uint64_t(row_begin) + n_rows > in.weights[weight].rows)
        fail("page plan: rows [{}, {}) of weight {} are outside its {} rows", row_begin, uint64_t(row_begin) + n_rows,
             weight, in.weights[weight].rows);
}
}  // namespace

void append_row_tiles(PagePlan& plan, const PlanInputs& in, uint32_t weight, uint32_t row_begin, uint32_t n_rows) {
    const uint32_t step = rows_per_page(in, weight);
    check_rows(in, weight, row_begin, n_rows);
    for (uint64_t r = 0; r < n_rows; r += step) {
        const uint32_t count = uint32_t(std::min<uint64_t>(step, n_rows - r));
        plan.tiles.push_back({weight, uint32_t(row_begin + r), count, count * in.weights[weight].row_bytes});
    }
}

void append_paired_row_tiles(PagePlan& plan, const PlanInputs& in, uint32_t weight_a, uint32_t weight_b,
                             uint32_t row_begin, uint32_t n_rows) {
    const uint32_t step = std::min(rows_per_page(in, weight_a), rows_per_page(in, weight_b));
    check_rows(in, weight_a, row_begin, n_rows);
    check_rows(in, weight_b, row_begin, n_rows);
    for (uint64_t r = 0; r < n_rows; r += step) {
        const uint32_t count = uint32_t(std::min<uint64_t>(step, n_rows - r));
        plan.tiles.push_back({weight_a, uint32_t(row_begin + r), count, count * in.weights[weight_a].row_bytes});
        plan.tiles.push_back({weight_b, uint32_t(row_begin + r), count, count * in.weights[weight_b].row_bytes});
    }
}

void finish_page_plan(PagePlan& plan, const PlanInputs& in) {
    plan.n_pages = uint32_t(std::min<size_t>(plan.tiles.size(), in.max_pages));
    if (!plan.tiles.empty() && plan.n_pages == 0) fail("page plan: the target gives an instruction no pages");
    // Page p is last used by the largest t with t % n == p; free pages in the order of those last uses.
    std::vector<std::pair<size_t, uint32_t>> last_use;
    for (uint32_t p = 0; p < plan.n_pages; ++p) {
        size_t n = plan.tiles.size();
        size_t last = p + ((n - 1 - p) / plan.n_pages) * plan.n_pages;
        last_use.push_back({last, p});
    }
    std::sort(last_use.begin(), last_use.end());
    plan.release_order.clear();
    for (auto& [t, p] : last_use) plan.release_order.push_back(p);
}

PagePlan row_tiles_plan(const PlanInputs& in, uint32_t weight, uint32_t row_begin, uint32_t n_rows) {
    PagePlan plan;
    append_row_tiles(plan, in, weight, row_begin, n_rows);
    finish_page_plan(plan, in);
    return plan;
}

PagePlan paired_row_tiles_plan(const PlanInputs& in, uint32_t weight_a, uint32_t weight_b, uint32_t row_begin,
                               uint32_t n_rows) {
    PagePlan plan;
    append_paired_row_tiles(plan, in, weight_a, weight_b, row_begin, n_rows);
    finish_page_plan(plan, in);
    return plan;
}

uint32_t mma_slice_cols(uint64_t page_bytes, const WeightFormat& w) {
    const uint32_t span = mma_span_cols(w.dtype);
    if (span == 0 || w.cols == 0) return 0;
    if (!mma_spans_fit(w.dtype, w.cols, w.row_bytes))  // whole rows, a tile's 16 one contiguous copy
        return kMmaGroupRows * w.row_bytes <= page_bytes ? w.cols : 0;
    const uint64_t span_bytes = w.row_bytes / (w.cols / span);
    if (span > 32) {  // block formats: an odd number of spans (the pieces' 4-byte words not a multiple of 8)
        const uint64_t spans = page_bytes / (kMmaGroupRows * span_bytes);
        return uint32_t((spans > 1 && spans % 2 == 0 ? spans - 1 : spans) * span);
    }
    uint64_t cols = page_bytes / (2 * kMmaGroupRows) / 64 * 64 + 32;  // 2 bytes a column
    while (cols > 32 && 2 * kMmaGroupRows * cols > page_bytes) cols -= 64;
    return 2 * kMmaGroupRows * cols > page_bytes ? 0 : uint32_t(cols);
}

uint32_t mma_row_align(const WeightFormat& w) {
    if (mma_span_cols(w.dtype) == 0 || mma_spans_fit(w.dtype, w.cols, w.row_bytes)) return 1;
    uint32_t align = 1;  // the fewest rows whose bytes are a multiple of 16
    while (align * w.row_bytes % 16) align *= 2;
    return align;
}

uint32_t mma_pass_tiles(uint32_t block_tokens, uint32_t n_weights, uint32_t max_pages) {
    // The device code's shapes (rows_math.cuh): 8 tiles x 1 chunk a warp, or 4 x 2.
    const uint32_t chunks = mma_chunks_per_warp(block_tokens, kMmaTeamWarps) <= 1 ? 1 : kMmaMaxChunks;
    const uint32_t tiles = std::min({kMmaAccumulators / 4 / chunks, kMmaMaxPassTiles, max_pages});
    return tiles / n_weights * n_weights;
}

bool use_mma_tiles(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t block_tokens) {
    if (!in.tensor_cores || mma_pass_tiles(block_tokens, uint32_t(weights.size()), in.max_pages) == 0) return false;
    for (uint32_t id : weights) {
        const WeightFormat& w = in.weights[id];
        // The device takes a pass's format, pitch and slices from its first weight: a gate/up pair alike or not at all.
        const WeightFormat& first = in.weights[*weights.begin()];
        if (w.dtype != first.dtype || w.cols != first.cols || w.row_bytes != first.row_bytes) return false;
        if (!mma_eligible(w.dtype, w.cols, block_tokens) || mma_slice_cols(in.page_bytes, w) == 0) return false;
    }
    return true;
}

PagePlan mma_tiles_plan(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t row_begin,
                        uint32_t n_rows, uint32_t block_tokens) {
    PagePlan plan;
    const std::vector<uint32_t> ids(weights);
    for (uint32_t id : ids) check_rows(in, id, row_begin, n_rows);
    const WeightFormat& format = in.weights[ids[0]];
    const uint32_t cols = format.cols, width = mma_slice_cols(in.page_bytes, format);
    const uint32_t groups = (n_rows + kMmaGroupRows - 1) / kMmaGroupRows;
    const uint32_t n_weights = uint32_t(ids.size());
    const uint32_t pass_tiles = mma_pass_tiles(block_tokens, n_weights, in.max_pages);
    if (pass_tiles == 0)
        fail("page plan: {} pages hold no pass of MMA tiles for {} weights and {} tokens", in.max_pages, n_weights,
             block_tokens);
    const uint32_t per_pass = pass_tiles / n_weights;
    for (uint32_t pass = 0; pass < groups; pass += per_pass) {
        const uint32_t in_pass = (std::min(groups, pass + per_pass) - pass) * n_weights;
        for (uint32_t col = 0; col < cols; col += width)
            for (uint32_t g = pass; g < std::min(groups, pass + per_pass); ++g)
                for (uint32_t id : ids) {
                    const uint32_t first = row_begin + g * kMmaGroupRows;
                    const uint32_t rows = std::min(kMmaGroupRows, row_begin + n_rows - first);
                    const uint32_t n_cols = std::min(width, cols - col);
                    const uint64_t piece = format.row_bytes * n_cols / cols;  // whole spans or whole rows: exact
                    plan.tiles.push_back({id, first, rows, rows * piece, col, n_cols, in_pass});
                }
    }
    finish_page_plan(plan, in);
    return plan;
}

uint32_t rows_per_input_read(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t block_tokens) {
    if (!use_mma_tiles(in, weights, block_tokens)) {
        // A block too long for MMA tiles in weights that take them: the device's scalar dots read every token's
        // inputs for each row.
        const bool too_long = block_tokens > kMmaMaxTokens && use_mma_tiles(in, weights, kMmaMaxTokens);
        return too_long ? 1 : UINT32_MAX;
    }
    const uint32_t n = uint32_t(weights.size());
    return kMmaGroupRows * (mma_pass_tiles(block_tokens, n, in.max_pages) / n);
}

PagePlan prefill_rows_plan(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t row_begin,
                           uint32_t n_rows, uint32_t block_tokens) {
    // Whole-row slices copy a tile's rows at once: their first byte and their bytes must be 16-byte multiples (on the
    // GPU targets rows are padded to 16 bytes, so any block; else a block that is not takes scalar dots).
    const uint32_t align = use_mma_tiles(in, weights, block_tokens) ? mma_row_align(in.weights[*weights.begin()]) : 0;
    if (align && row_begin % align == 0 && n_rows % align == 0)
        return mma_tiles_plan(in, weights, row_begin, n_rows, block_tokens);
    const uint32_t* id = weights.begin();
    return weights.size() == 2 ? paired_row_tiles_plan(in, id[0], id[1], row_begin, n_rows)
                               : row_tiles_plan(in, id[0], row_begin, n_rows);
}

uint64_t plan_weight_bytes(const PagePlan& plan) {
    uint64_t total = 0;
    for (const Tile& t : plan.tiles) total += t.bytes;
    return total;
}

}  // namespace mk

// Page plans shared by the ops that stream weight rows: whole rows packed into page-sized tiles.
#pragma once
#include <cstdint>

#include "instructions/registry.hpp"

namespace mk {

// Appends tiles covering rows [row_begin, row_begin + n_rows) of `weight`, each at most one page.
// Throws mk::Error when a single row does not fit a page (the target's pages are too small).
void append_row_tiles(PagePlan& plan, const PlanInputs& in, uint32_t weight, uint32_t row_begin, uint32_t n_rows);
// Interleaves tiles of two weights row chunk by row chunk (gate/up: both rows of a chunk are used together).
void append_paired_row_tiles(PagePlan& plan, const PlanInputs& in, uint32_t weight_a, uint32_t weight_b,
                             uint32_t row_begin, uint32_t n_rows);
// Sets n_pages (as many as the tiles, at most max_pages) and the release order: a page is freed
// after the last tile that uses it, tile t using page t % n_pages.
void finish_page_plan(PagePlan& plan, const PlanInputs& in);

// The whole plan of an op that streams rows [row_begin, row_begin + n_rows) of one weight (append + finish),
// and of gate/up's paired rows.
PagePlan row_tiles_plan(const PlanInputs& in, uint32_t weight, uint32_t row_begin, uint32_t n_rows);
PagePlan paired_row_tiles_plan(const PlanInputs& in, uint32_t weight_a, uint32_t weight_b, uint32_t row_begin,
                               uint32_t n_rows);

uint64_t plan_weight_bytes(const PagePlan& plan);

}  // namespace mk

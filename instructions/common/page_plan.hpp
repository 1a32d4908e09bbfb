// Page plans shared by the ops that stream weight rows: whole rows packed into page-sized tiles.
#pragma once
#include <cstdint>
#include <initializer_list>

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

// MMA tiles, for the prefill ops' tensor-core path (token_rows.hpp's mma_eligible, rows_math.cuh): the rows in groups
// of kMmaGroupRows (token_rows.hpp), each group's columns in slices of mma_slice_cols; a pass of up to mma_pass_tiles tiles (groups of
// one weight, or gate/up pairs) goes slice by slice: for each slice, for each group, each weight's tile. A consumer
// holds one slice of its pass (that many pages) while its accumulators stay in registers across the slices, so it
// reads the activations' slice once for all the pass's rows.
// The widest slice whose 16 rows of `w` fit a page, in whole spans (mma_span_cols); 0 if none fits. BF16/F16: an
// odd multiple of 32 columns, rows 64 bytes mod 128 apart, so the 8 lanes of a 128-bit shared load phase hit distinct
// banks: 480 columns (15360 bytes) for 16 KiB pages. The block formats: an odd number of spans, so the 8 rows g of a
// 2- or 4-byte shared load (lanes 4g..4g+3) fall in distinct banks: Q8_0 768 columns (816 bytes a row, 13056 a tile),
// Q4_0 1792 (1008 bytes a row), Q4_1 1408 (880; 12 spans, 960 bytes, would put rows g and g + 2 in one bank).
// Rows whose spans do not fit (token_rows.hpp's mma_spans_fit) come in whole-row slices, if 16 rows fit a page.
uint32_t mma_slice_cols(uint64_t page_bytes, const WeightFormat& w);
// The rows an MMA tile's first row and row count are multiples of: 1 for spans; for whole-row slices the fewest
// rows whose bytes are a multiple of 16 (2 for SmolLM2's 360-byte Q4_1 rows), so each tile is one aligned copy.
uint32_t mma_row_align(const WeightFormat& w);
// Tiles in each slice of a pass: the most the warps' accumulators (token_rows.hpp) and the pages allow, whole groups
// of `n_weights` tiles; 0 when not even one group fits.
uint32_t mma_pass_tiles(uint32_t block_tokens, uint32_t n_weights, uint32_t max_pages);
// Whether an op streaming `weights` (1, or 2 paired) for a token block of `block_tokens` takes MMA tiles: every
// weight mma_eligible, and pages enough to hold a pass's slice.
bool use_mma_tiles(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t block_tokens);
// The plan: rows [row_begin, row_begin + n_rows) of each of `weights` (same shape) in MMA tiles.
PagePlan mma_tiles_plan(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t row_begin,
                        uint32_t n_rows, uint32_t block_tokens);
// The rows a prefill rows op's token block reads its inputs once for (rows_math.cuh): an MMA pass's where the weights
// stream in MMA tiles, one (scalar dots) where they would but the block is too long, else the whole row block
// (UINT32_MAX: the CPU's tile kernels read a token block's inputs once a tile).
uint32_t rows_per_input_read(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t block_tokens);
// A prefill rows op's plan for a token block of `block_tokens`: MMA tiles where use_mma_tiles, else whole rows
// (paired for two weights).
PagePlan prefill_rows_plan(const PlanInputs& in, std::initializer_list<uint32_t> weights, uint32_t row_begin,
                           uint32_t n_rows, uint32_t block_tokens);

}  // namespace mk

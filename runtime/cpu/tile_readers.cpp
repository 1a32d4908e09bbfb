// Tile readers: in place, and through checked pages.
#include "runtime/cpu/tile_readers.hpp"

#include <algorithm>
#include <cstring>

#include "models/error.hpp"

namespace mk {

const uint8_t* DirectTileReader::tile(uint32_t index) {
    if (index >= plan_->tiles.size()) fail("tile {} requested, the page plan has {} tiles", index, plan_->tiles.size());
    const Tile& t = plan_->tiles[index];
    return weights_[t.weight].row(t.row_begin) + t.col_byte();
}

uint64_t DirectTileReader::pitch(uint32_t index) const { return weights_[plan_->tiles.at(index).weight].row_bytes; }

SmPages::SmPages(uint32_t n_pages, uint64_t page_bytes_)
    : page_bytes(page_bytes_), memory(size_t(n_pages) * page_bytes_), hand_out(n_pages) {
    for (uint32_t p = 0; p < n_pages; ++p) hand_out[p] = p;
}

CheckedTileReader::CheckedTileReader(uint32_t max_pages) {
    slot_page_.reserve(max_pages);
    slot_tile_.reserve(max_pages);
    scratch_.reserve(max_pages);
}

void CheckedTileReader::begin(SmPages& pages, const PagePlan& plan, const WeightRef* weights) {
    if (plan.n_pages > pages.hand_out.size())
        fail("the instruction needs {} pages, the SM has {}", plan.n_pages, pages.hand_out.size());
    if (!plan.tiles.empty() && plan.n_pages == 0) fail("the page plan has {} tiles but no pages", plan.tiles.size());
    pages_ = &pages;
    plan_ = &plan;
    weights_ = weights;
    slot_page_.assign(pages.hand_out.begin(), pages.hand_out.begin() + plan.n_pages);
    slot_tile_.assign(plan.n_pages, kEmpty);
    next_tile_ = 0;
}

const uint8_t* CheckedTileReader::tile(uint32_t index) {
    if (index >= plan_->tiles.size()) fail("tile {} requested, the page plan has {} tiles", index, plan_->tiles.size());
    const uint32_t slot = index % plan_->n_pages;
    uint8_t* page = pages_->memory.data() + uint64_t(slot_page_[slot]) * pages_->page_bytes;
    if (index < next_tile_) {
        // A re-read: fine while the page still holds the tile, as it would on the GPU.
        if (slot_tile_[slot] == index) return page;
        if (slot_tile_[slot] != kEmpty && slot_tile_[slot] > index)
            fail("tile {} requested again, but its page (slot {}) now holds tile {}", index, slot, slot_tile_[slot]);
        fail("tile {} requested after tile {}: tiles stream into pages in order", index, next_tile_ - 1);
    }
    const Tile& t = plan_->tiles[index];
    if (t.bytes > pages_->page_bytes) fail("tile {} is {} bytes, a page holds {}", index, t.bytes, pages_->page_bytes);
    const WeightRef& w = weights_[t.weight];
    if (t.whole_rows()) {
        std::memcpy(page, w.row(t.row_begin), t.bytes);
    } else {
        const uint64_t piece = t.piece_bytes();
        for (uint32_t r = 0; r < t.n_rows; ++r) std::memcpy(page + r * piece, w.row(t.row_begin + r) + t.col_byte(), piece);
    }
    slot_tile_[slot] = index;
    next_tile_ = index + 1;
    return page;
}

uint64_t CheckedTileReader::pitch(uint32_t index) const {
    const Tile& t = plan_->tiles.at(index);
    return t.whole_rows() ? weights_[t.weight].row_bytes : t.piece_bytes();
}

void CheckedTileReader::end() {
    // Freed pages first, in release order; then the pages this instruction did not take, unchanged.
    std::vector<uint32_t>& order = pages_->hand_out;
    scratch_.clear();
    for (uint32_t slot : plan_->release_order) scratch_.push_back(slot_page_.at(slot));
    scratch_.insert(scratch_.end(), order.begin() + plan_->n_pages, order.end());
    if (scratch_.size() != order.size()) fail("the page plan releases {} of its {} pages", plan_->release_order.size(), plan_->n_pages);
    std::copy(scratch_.begin(), scratch_.end(), order.begin());
}

}  // namespace mk

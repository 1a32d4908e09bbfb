// The two ways the CPU interpreter hands an op its weight tiles: in place (fast mode) and through
// the virtual SM's pages with the GPU's page accounting checked (checked mode).
#pragma once
#include <cstdint>
#include <vector>

#include "instructions/op_context.hpp"

namespace mk {

// Fast mode: tile t is a pointer into the weight itself.
class DirectTileReader final : public TileReader {
public:
    void begin(const PagePlan& plan, const WeightRef* weights) {
        plan_ = &plan;
        weights_ = weights;
    }
    const uint8_t* tile(uint32_t index) override;
    uint64_t pitch(uint32_t index) const override;

private:
    const PagePlan* plan_ = nullptr;
    const WeightRef* weights_ = nullptr;
};

// One virtual SM's shared memory: n_pages pages of page_bytes, and the order in which they are
// handed to the next instruction (front: the pages the previous instruction freed, in its order).
struct SmPages {
    SmPages(uint32_t n_pages, uint64_t page_bytes);
    uint64_t page_bytes;
    std::vector<uint8_t> memory;       // (n_pages, page_bytes) bytes
    std::vector<uint32_t> hand_out;    // physical page ids, next instruction's slot k gets hand_out[k]
};

// Checked mode: instruction i's page slot k is the k-th page instruction i-1 freed (then the
// SM's other free pages); tile t is copied into slot t % n_pages when first requested (an MMA tile's row
// pieces packed). Throws
// mk::Error on a tile outside the plan, a tile requested after a later one (tiles stream in
// order), or a tile whose page a later tile has since overwritten.
class CheckedTileReader final : public TileReader {
public:
    explicit CheckedTileReader(uint32_t max_pages);
    // Takes the instruction's pages from `pages`; throws if the plan needs more than the SM has.
    void begin(SmPages& pages, const PagePlan& plan, const WeightRef* weights);
    const uint8_t* tile(uint32_t index) override;
    uint64_t pitch(uint32_t index) const override;
    // Frees the pages in the plan's release order: they become the next instruction's first pages.
    void end();
    // The physical page behind the current instruction's slot (for tests).
    uint32_t physical_page(uint32_t slot) const { return slot_page_.at(slot); }

private:
    static constexpr uint32_t kEmpty = 0xffffffffu;
    SmPages* pages_ = nullptr;
    const PagePlan* plan_ = nullptr;
    const WeightRef* weights_ = nullptr;
    std::vector<uint32_t> slot_page_;  // physical page of each slot
    std::vector<uint32_t> slot_tile_;  // tile each slot holds now, or kEmpty
    std::vector<uint32_t> scratch_;    // the new hand-out order, built in end()
    uint32_t next_tile_ = 0;           // one past the highest tile loaded so far
};

}  // namespace mk

// Checked page accounting: tiles stream through the SM's pages in order, freed pages pass to the
// next instruction in release order, and every misuse fails loudly.
#include "runtime/cpu/tile_readers.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <numeric>

#include "instructions/common/page_plan.hpp"
#include "models/error.hpp"

using namespace mk;
using Catch::Matchers::Contains;

namespace {

// A (16, 8) fp32 weight with distinct values, two rows to a 64-byte page.
struct Fixture {
    std::vector<float> values = std::vector<float>(16 * 8);
    WeightFormat format{uint32_t(DType::F32), 16, 8, 32};
    WeightRef weight;
    Fixture() {
        std::iota(values.begin(), values.end(), 1.0f);
        weight = {reinterpret_cast<const uint8_t*>(values.data()), DType::F32, 16, 8, 32};
    }
    PagePlan plan(uint32_t row_begin, uint32_t n_rows, uint32_t max_pages) const {
        PagePlan p;
        const PlanInputs in{&format, 64, max_pages};
        append_row_tiles(p, in, 0, row_begin, n_rows);
        finish_page_plan(p, in);
        return p;
    }
};

std::string error_of(const std::function<void()>& body) {
    try {
        body();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("checked tiles hold the weight's rows and stream through the pages in order", "[cpu]") {
    Fixture f;
    SmPages pages(4, 64);
    CheckedTileReader reader(4);
    const PagePlan plan = f.plan(2, 10, 3);  // 5 tiles in 3 pages
    REQUIRE(plan.tiles.size() == 5);
    reader.begin(pages, plan, &f.weight);
    for (uint32_t t = 0; t < 5; ++t) {
        const float* rows = reinterpret_cast<const float*>(reader.tile(t));
        CHECK(std::memcmp(rows, f.values.data() + (2 + 2 * t) * 8, 64) == 0);
        CHECK(reader.tile(t) == reinterpret_cast<const uint8_t*>(rows));  // a resident tile may be re-read
    }
    CHECK(reader.tile(3) != nullptr);  // tile 3 (slot 0) is still resident after tile 4 (slot 1)
    reader.end();

    reader.begin(pages, plan, &f.weight);
    SECTION("a tile outside the plan") { CHECK_THAT(error_of([&] { reader.tile(5); }), Contains("tile 5 requested, the page plan has 5 tiles")); }
    SECTION("a tile whose page was overwritten") {
        reader.tile(0);
        reader.tile(3);
        CHECK(error_of([&] { reader.tile(0); }) == "tile 0 requested again, but its page (slot 0) now holds tile 3");
    }
    SECTION("a tile requested after a later one") {
        reader.tile(2);
        CHECK(error_of([&] { reader.tile(1); }) == "tile 1 requested after tile 2: tiles stream into pages in order");
    }
    SECTION("more pages than the SM has") {
        SmPages small(2, 64);
        CHECK(error_of([&] { reader.begin(small, plan, &f.weight); }) == "the instruction needs 3 pages, the SM has 2");
    }
}

TEST_CASE("checked pages pass to the next instruction in the order they were freed", "[cpu]") {
    Fixture f;
    SmPages pages(5, 64);
    CheckedTileReader reader(5);
    const PagePlan first = f.plan(0, 8, 3);  // 4 tiles in 3 pages: slot 0 is last used by tile 3
    REQUIRE(first.release_order == std::vector<uint32_t>{1, 2, 0});
    reader.begin(pages, first, &f.weight);
    std::vector<uint32_t> physical;
    for (uint32_t k = 0; k < 3; ++k) physical.push_back(reader.physical_page(k));
    CHECK(physical == std::vector<uint32_t>{0, 1, 2});
    for (uint32_t t = 0; t < 4; ++t) reader.tile(t);
    reader.end();

    const PagePlan second = f.plan(0, 10, 5);  // 5 pages: the 3 freed ones, then the 2 never used
    reader.begin(pages, second, &f.weight);
    for (uint32_t k = 0; k < 3; ++k) CHECK(reader.physical_page(k) == physical[first.release_order[k]]);
    CHECK(reader.physical_page(3) == 3);
    CHECK(reader.physical_page(4) == 4);
    reader.end();

    const PagePlan third = f.plan(4, 2, 5);  // 1 page: the first one the second instruction freed
    reader.begin(pages, third, &f.weight);
    CHECK(reader.physical_page(0) == physical[first.release_order[0]]);
    const float* rows = reinterpret_cast<const float*>(reader.tile(0));
    CHECK(rows[0] == f.values[4 * 8]);
    reader.end();
}

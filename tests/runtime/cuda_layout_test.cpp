// The CUDA backend's host side, on the CPU: the repacked (row-padded) weights run through the CPU
// ops, the upload layout (weight blob, tiles, release orders) against the weights it was built
// from, the kernel's page hand-off (PageRing) against the CPU's checked pages, and the trace summary.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "models/error.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/cpu/tile_readers.hpp"
#include "runtime/cuda/page_ring.hpp"
#include "runtime/cuda/trace.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "runtime/program.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/tensor_parallel.hpp"
#include "tests/test_paths.hpp"

namespace mk {
namespace {

Model synthetic(const std::string& spec, const std::string& file) {
    const auto path = test::output_dir() / file;
    write_synthetic_model(parse_synthetic_spec(spec), path);
    return load_model(path);
}

Schedule padded_schedule(const Model& model, const Target& target) {
    return compile_schedule(model.config, padded_row_formats(weight_formats(model), kDeviceRowAlign), target,
                            Policy::critical_path);
}

std::vector<std::vector<float>> run_steps(const Model& model, Schedule schedule, int steps) {
    ProgramOptions options;
    options.n_threads = 2;
    options.check_pages = true;
    auto program = make_cpu_program(model, std::move(schedule), options);
    std::vector<std::vector<float>> out;
    for (int p = 0; p < steps; ++p) {
        program->step(int32_t((p * 7919 + 13) % model.config.vocab_size), p, {}, {});
        out.emplace_back(program->logits().begin(), program->logits().end());
    }
    return out;
}

// A prepared schedule with stand-in memory (prepare only checks that memory exists).
struct Prepared {
    ModelWeights weights;
    std::vector<uint8_t> stand_in = std::vector<uint8_t>(16);
    PreparedSchedule schedule;
    Prepared(const Model& model, const Schedule& s) : weights(bind_weights(model, s)) {
        ProgramMemory memory;
        memory.arena = stand_in.data();
        memory.weights = weights.refs.data();
        memory.k_cache = memory.v_cache = stand_in.data();
        memory.ctx_len = 16;
        memory.rope_inv_freq = weights.rope_inv_freq.data();
        schedule = prepare_schedule(s, memory, true, false);
    }
};

}  // namespace

TEST_CASE("padded rows (the CUDA layout) give the CPU backend the same logits, bit for bit", "[cpu]") {
    for (const char* dtype : {"q4_1", "q8_0", "bf16"}) {
        INFO(dtype);
        Model model = synthetic(fmt::format("synthetic:smollm2-135m:{}:layers=2:vocab=1024:seed=11", dtype),
                                fmt::format("padded_{}.gguf", dtype));
        const Target target = target_custom(5, 232448);
        Schedule plain = compile_schedule(model.config, weight_formats(model), target, Policy::critical_path);
        Schedule padded = padded_schedule(model, target);
        bool any_padded = false;
        for (size_t id = 0; id < plain.weights.size(); ++id) {
            CHECK(padded.weights[id].row_bytes % (plain.weights[id].rows > 1 ? kDeviceRowAlign : 1) == 0);
            any_padded = any_padded || padded.weights[id].row_bytes != plain.weights[id].row_bytes;
        }
        // SmolLM2's 576-wide rows are 360 bytes in Q4_1 and 612 in Q8_0: both need padding.
        if (std::string(dtype) != "bf16") CHECK(any_padded);
        CHECK(run_steps(model, padded, 4) == run_steps(model, plain, 4));
    }
}

TEST_CASE("one rank's upload layout is its slice of the whole schedule's", "[cpu][tp]") {
    // What a GPU running one tensor-parallel rank uploads: that rank's streams, tiles and release orders.
    Model model = synthetic("synthetic:smollm2-135m:q8_0:layers=2:vocab=1023:seed=13", "layout_tp.gguf");
    const auto formats = padded_row_formats(tp_weight_formats(weight_formats(model), model_dims(model.config), 3),
                                            kDeviceRowAlign);
    const Schedule s = compile_schedule(model.config, formats, target_custom(4, 232448), Policy::critical_path, 3);
    Prepared prepared(model, s);
    const WeightBlob blob = build_weight_blob(prepared.weights.refs);
    const UploadLayout whole = build_upload_layout(s, prepared.schedule, blob);
    for (uint32_t rank = 0; rank < 3; ++rank) {
        INFO("rank " << rank);
        const uint32_t first = rank * s.target.n_sms;
        const UploadLayout part = build_upload_layout(s, prepared.schedule, blob, first, s.target.n_sms);
        REQUIRE(part.stream_begin.size() == s.target.n_sms + 1);
        const uint32_t i0 = whole.stream_begin[first], i1 = whole.stream_begin[first + s.target.n_sms];
        REQUIRE(part.instructions.size() == i1 - i0);
        CHECK(std::memcmp(part.instructions.data(), whole.instructions.data() + i0, (i1 - i0) * sizeof(Instruction)) == 0);
        for (uint32_t k = 0; k <= s.target.n_sms; ++k) CHECK(part.stream_begin[k] == whole.stream_begin[first + k] - i0);
        const uint32_t t0 = whole.tile_begin[i0], r0 = whole.release_begin[i0];
        REQUIRE(part.tiles.size() == whole.tile_begin[i1] - t0);
        for (uint32_t t = 0; t < part.tiles.size(); ++t)
            CHECK(std::memcmp(&part.tiles[t], &whole.tiles[t0 + t], sizeof(DeviceTile)) == 0);
        for (uint32_t i = 0; i <= i1 - i0; ++i) {
            CHECK(part.tile_begin[i] == whole.tile_begin[i0 + i] - t0);
            CHECK(part.release_begin[i] == whole.release_begin[i0 + i] - r0);
        }
    }
}

TEST_CASE("the upload layout's tiles hold exactly the rows the page plans name", "[cpu]") {
    // A Q4_1 decode step's whole rows, and a BF16 prefill step's MMA tiles (column slices of 16 rows).
    const bool prefill = GENERATE(false, true);
    Model model = prefill ? synthetic("synthetic:smollm2-135m:bf16:layers=1:vocab=512:seed=12", "layout_bf16.gguf")
                          : synthetic("synthetic:smollm2-135m:q4_1:layers=2:vocab=1024:seed=12", "layout_q4_1.gguf");
    const Schedule s =
        prefill ? compile_prefill_schedule(model.config, padded_row_formats(weight_formats(model), kDeviceRowAlign),
                                           target_h200(), Policy::critical_path, 32, false)
                : padded_schedule(model, target_h200());
    INFO((prefill ? "bf16 prefill" : "q4_1 decode"));
    Prepared prepared(model, s);
    const WeightBlob blob = build_weight_blob(prepared.weights.refs);
    const UploadLayout layout = build_upload_layout(s, prepared.schedule, blob);

    REQUIRE(layout.stream_begin.size() == s.streams.size() + 1);
    REQUIRE(layout.instructions.size() == s.n_instructions());
    REQUIRE(layout.tile_begin.size() == layout.instructions.size() + 1);
    uint32_t flat = 0, mma_tiles = 0;
    for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
        CHECK(layout.stream_begin[sm] == flat);
        for (const PreparedInstruction& p : prepared.schedule.streams[sm]) {
            const PagePlan& plan = *p.plan;
            CHECK(std::memcmp(&layout.instructions[flat], p.ins, sizeof(Instruction)) == 0);
            REQUIRE(layout.tile_begin[flat + 1] - layout.tile_begin[flat] == plan.tiles.size());
            REQUIRE(layout.release_begin[flat + 1] - layout.release_begin[flat] == plan.n_pages);
            for (uint32_t t = 0; t < plan.tiles.size(); ++t) {
                const DeviceTile& d = layout.tiles[layout.tile_begin[flat] + t];
                const Tile& want = plan.tiles[t];
                const WeightRef& w = prepared.weights.refs[want.weight];
                CHECK(d.src_offset % 16 == 0);
                CHECK(d.bytes % 16 == 0);
                CHECK(d.bytes <= s.target.page_bytes);
                CHECK((d.weight == want.weight && d.row_begin == want.row_begin && d.n_rows == want.n_rows &&
                       d.col_begin == want.col_begin && d.n_cols == want.n_cols));
                if (want.whole_rows()) {
                    REQUIRE(d.src_offset + d.bytes <= blob.bytes.size());
                    CHECK(std::memcmp(blob.bytes.data() + d.src_offset, w.row(want.row_begin), d.bytes) == 0);
                    continue;
                }
                ++mma_tiles;
                // An MMA tile: each row's piece, the blob's row stride apart.
                const uint64_t stride = blob.weights[want.weight].row_bytes, piece = d.piece_bytes();
                for (uint32_t r = 0; r < d.n_rows; ++r) {
                    REQUIRE(d.src_offset + r * stride + piece <= blob.bytes.size());
                    CHECK(std::memcmp(blob.bytes.data() + d.src_offset + r * stride,
                                      w.row(want.row_begin + r) + want.col_byte(), piece) == 0);
                }
            }
            for (uint32_t k = 0; k < plan.n_pages; ++k)
                CHECK(layout.release_order[layout.release_begin[flat] + k] == plan.release_order[k]);
            ++flat;
        }
    }
    CHECK(layout.max_pages <= s.target.n_pages);
    CHECK((mma_tiles > 0) == prefill);  // BF16 rows of 576 columns: 480 + 96, 32 tokens
    // Every weight the device reads sits in the blob with its padded stride and shape.
    const std::vector<DeviceWeight> table = device_weights(blob, blob.bytes.data());
    for (size_t id = 0; id < table.size(); ++id) {
        const WeightRef& w = prepared.weights.refs[id];
        if (!w.data) continue;
        CHECK((table[id].rows == w.rows && table[id].cols == w.cols && table[id].row_bytes == w.row_bytes));
        CHECK(std::memcmp(table[id].data, w.data, uint64_t(w.rows) * w.row_bytes) == 0);
    }
}

TEST_CASE("the weight blob refuses rows that are not a legal bulk copy", "[cpu]") {
    Model model = synthetic("synthetic:smollm2-135m:q4_1:layers=1:vocab=512:seed=13", "layout_unpadded.gguf");
    const Schedule s = compile_schedule(model.config, weight_formats(model), target_h200(), Policy::critical_path);
    Prepared prepared(model, s);
    CHECK_THROWS_WITH(build_weight_blob(prepared.weights.refs), Catch::Contains("padded rows"));
}

TEST_CASE("the kernel's page hand-off gives every tile the page the CPU's checked pages give it", "[cpu]") {
    Model model = synthetic("synthetic:smollm2-135m:q4_1:layers=2:vocab=1024:seed=14", "layout_pages.gguf");
    for (const Target& target : {target_h200(), target_custom(3, 65536)}) {
        const Schedule s = padded_schedule(model, target);
        Prepared prepared(model, s);
        const WeightBlob blob = build_weight_blob(prepared.weights.refs);
        const UploadLayout layout = build_upload_layout(s, prepared.schedule, blob);
        uint64_t tiles_checked = 0;
        for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
            SmPages pages(s.target.n_pages, s.target.page_bytes);
            CheckedTileReader reader(s.target.n_pages);
            PageRing ring;
            ring.reset(s.target.n_pages);
            for (uint32_t i = layout.stream_begin[sm]; i < layout.stream_begin[sm + 1]; ++i) {
                const PagePlan& plan = *prepared.schedule.streams[sm][i - layout.stream_begin[sm]].plan;
                reader.begin(pages, plan, prepared.weights.refs.data());
                for (uint32_t t = 0; t < plan.tiles.size(); ++t) {
                    reader.tile(t);
                    CHECK(ring.page_of_tile(t, plan.n_pages) == reader.physical_page(t % plan.n_pages));
                    ++tiles_checked;
                }
                reader.end();
                if (plan.n_pages) {
                    uint32_t order[PageRing::kMaxPages / 4];
                    pack_release_order(layout.release_order.data() + layout.release_begin[i], plan.n_pages, order);
                    ring.finish(order, plan.n_pages);
                }
                for (uint32_t k = 0; k < s.target.n_pages; ++k) CHECK(ring.hand_out[k] == pages.hand_out[k]);
            }
        }
        CHECK(tiles_checked > 0);
    }
}

TEST_CASE("the trace summary splits each SM's time into busy, waiting and idle", "[cpu]") {
    // Two SMs, one instruction each, one step: SM 0 waits 100 ns then computes 300 ns; SM 1 starts at
    // 200, computes 200 ns. Span 0..400 ns: busy 500 of 800, waiting 100, idle 200.
    UploadLayout layout;
    layout.instructions.resize(2);
    layout.stream_begin = {0, 1, 2};
    std::vector<TraceRecord> records = {
        {1000, 1100, 1400, 900, 1150},  // load started 100 ns before the start, ended 50 after it
        {1200, 1200, 1400, 0, 0},
    };
    const TraceSummary s = summarize_trace(layout, records, 1);
    CHECK(s.records == 2);
    CHECK(s.span_us == Approx(0.4));
    CHECK(s.busy_pct == Approx(62.5));
    CHECK(s.wait_pct == Approx(12.5));
    CHECK(s.idle_pct == Approx(25.0));
    CHECK(s.load_overlap_pct == Approx(100.0 * 100 / 250));
}

}  // namespace mk

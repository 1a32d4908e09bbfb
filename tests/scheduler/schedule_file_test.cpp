// .mks tests: a round trip keeps every field, every truncation and every flipped byte is refused
// cleanly, other versions and absurd counts are refused by name, and the JSON dump reads back.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/error.hpp"
#include "scheduler/schedule_file.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;

namespace {

// Every field away from its default, so a field the format forgets cannot round-trip by luck.
Schedule sample() {
    Schedule s = tiny_schedule(3, 2);
    s.target = {"h200-test", 3, 232448, 64, 4, 4300.5, 500.25, 700.125, 150.0625};
    s.dims.norm_eps = 1e-6f;
    s.dims.qkv_bias = 1;
    s.dims.qk_norm = 1;
    s.dims.kv_type = uint32_t(KvType::bf16);
    s.config_hash = 0xfedcba9876543210ull;
    s.rank_arena_bytes = 12345;
    s.target.link_ns = 777.0;
    s.tp_size = 2;
    s.policy = "critical-path";
    s.n_attn_parts = 16;
    s.n_lm_blocks = 7;
    s.weights[5] = {30, 3072, 2048, 4096};
    s.buffers.push_back({"x", 256, 8192, "(d_model) fp32 residual stream"});
    s.arena_bytes = 8448;
    s.logits_off = 12;
    s.token_off = 44;
    Instruction a = matvec(16, 4, 0, 4), b = matvec(0, 4, 8, 4), k = kv_write(true, 1, 0, 4);
    signal(a, 0, 3);
    wait(b, 0, 3, Operand::partials);
    wait(b, 1, 0, Operand::output);
    signal(b, 1);
    a.flags = 5;
    a.reserved1[2] = 9;
    s.streams = {{a, k}, {}, {b}};
    finish(s);
    return s;
}

uint64_t fnv1a64(const uint8_t* data, size_t size) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

// Rewrites the trailing checksum so a deliberate edit reaches the parser's later checks.
void reseal(std::vector<uint8_t>& bytes) {
    const uint64_t h = fnv1a64(bytes.data(), bytes.size() - 8);
    for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = uint8_t(h >> (8 * i));
}

void check_same(const Schedule& a, const Schedule& b) {
    CHECK(a.target.name == b.target.name);
    CHECK(a.target.n_sms == b.target.n_sms);
    CHECK(a.target.smem_bytes == b.target.smem_bytes);
    CHECK(a.target.page_bytes == b.target.page_bytes);
    CHECK(a.target.n_pages == b.target.n_pages);
    CHECK(a.target.bandwidth_gbs == b.target.bandwidth_gbs);
    CHECK(a.target.sm_gflops == b.target.sm_gflops);
    CHECK(a.target.hop_ns == b.target.hop_ns);
    CHECK(a.target.instruction_ns == b.target.instruction_ns);
    CHECK(std::memcmp(&a.dims, &b.dims, sizeof(ModelDims)) == 0);
    CHECK(a.config_hash == b.config_hash);
    CHECK(a.rank_arena_bytes == b.rank_arena_bytes);
    CHECK(a.target.link_ns == b.target.link_ns);
    CHECK(a.tp_size == b.tp_size);
    CHECK(a.policy == b.policy);
    CHECK(a.n_attn_parts == b.n_attn_parts);
    CHECK(a.n_lm_blocks == b.n_lm_blocks);
    REQUIRE(a.weights.size() == b.weights.size());
    for (size_t i = 0; i < a.weights.size(); ++i) {
        CHECK(a.weights[i].dtype == b.weights[i].dtype);
        CHECK(a.weights[i].rows == b.weights[i].rows);
        CHECK(a.weights[i].cols == b.weights[i].cols);
        CHECK(a.weights[i].row_bytes == b.weights[i].row_bytes);
    }
    REQUIRE(a.buffers.size() == b.buffers.size());
    for (size_t i = 0; i < a.buffers.size(); ++i) {
        CHECK(a.buffers[i].name == b.buffers[i].name);
        CHECK(a.buffers[i].offset == b.buffers[i].offset);
        CHECK(a.buffers[i].bytes == b.buffers[i].bytes);
        CHECK(a.buffers[i].layout == b.buffers[i].layout);
    }
    CHECK(a.arena_bytes == b.arena_bytes);
    CHECK(a.logits_off == b.logits_off);
    CHECK(a.token_off == b.token_off);
    REQUIRE(a.counters.size() == b.counters.size());
    for (size_t i = 0; i < a.counters.size(); ++i) {
        CHECK(a.counters[i].name == b.counters[i].name);
        CHECK(a.counters[i].step_total == b.counters[i].step_total);
    }
    REQUIRE(a.streams.size() == b.streams.size());
    for (size_t sm = 0; sm < a.streams.size(); ++sm) {
        REQUIRE(a.streams[sm].size() == b.streams[sm].size());
        for (size_t i = 0; i < a.streams[sm].size(); ++i)
            CHECK(std::memcmp(&a.streams[sm][i], &b.streams[sm][i], sizeof(Instruction)) == 0);
    }
}

}  // namespace

TEST_CASE("a schedule survives a round trip through bytes and a file", "[cpu]") {
    const Schedule s = sample();
    const std::vector<uint8_t> bytes = serialize_schedule(s);
    const Schedule back = parse_schedule(bytes.data(), bytes.size(), "sample.mks");
    check_same(s, back);
    CHECK(serialize_schedule(back) == bytes);

    const std::filesystem::path dir = MK_TEST_OUTPUT_DIR;
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "schedule_file_test.mks").string();
    save_schedule(s, path);
    check_same(s, load_schedule(path));
    CHECK_THROWS_WITH(load_schedule(path + ".missing"), Catch::Contains(".missing: cannot open"));
}

TEST_CASE("every truncation of a schedule file is refused", "[cpu]") {
    const std::vector<uint8_t> bytes = serialize_schedule(sample());
    for (size_t n = 0; n < bytes.size(); ++n) {
        INFO("truncated to " << n << " of " << bytes.size() << " bytes");
        CHECK_THROWS_AS(parse_schedule(bytes.data(), n, "cut.mks"), Error);
    }
    CHECK_THROWS_WITH(parse_schedule(bytes.data(), 10, "cut.mks"),
                      "cut.mks: 10 bytes is too small to be an mk schedule");
}

TEST_CASE("every flipped byte of a schedule file is refused", "[cpu]") {
    const std::vector<uint8_t> good = serialize_schedule(sample());
    for (size_t i = 0; i < good.size(); ++i) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= 0x20;
        INFO("byte " << i);
        CHECK_THROWS_AS(parse_schedule(bad.data(), bad.size(), "flip.mks"), Error);
    }
    std::vector<uint8_t> bad = good;
    bad[100] ^= 1;
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "flip.mks"),
                      Catch::StartsWith("flip.mks: checksum mismatch") && Catch::Contains("corrupt or truncated"));
    bad = good;
    bad[0] = 'X';
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "flip.mks"), "flip.mks: not an mk schedule (bad magic)");
}

TEST_CASE("a KV-cache type this build does not know is refused in one line", "[cpu]") {
    Schedule s = sample();
    const std::vector<uint8_t> good = serialize_schedule(s);
    REQUIRE(parse_schedule(good.data(), good.size(), "kv.mks").dims.kv_type == uint32_t(KvType::bf16));
    s.dims.kv_type = 7;
    const std::vector<uint8_t> bad = serialize_schedule(s);
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "kv.mks"),
                      "kv.mks: KV-cache type 7 is not one this build knows (0 f32, 1 bf16); compile the schedule again");
}

TEST_CASE("another version, absurd counts and trailing bytes are refused by name", "[cpu]") {
    const std::vector<uint8_t> good = serialize_schedule(sample());
    std::vector<uint8_t> bad = good;
    bad[8] = uint8_t(kScheduleVersion + 1);
    reseal(bad);
    CHECK_THROWS_WITH(
        parse_schedule(bad.data(), bad.size(), "old.mks"),
        fmt::format("old.mks: schedule version {}, this build reads version {}; compile the schedule again",
                    kScheduleVersion + 1, kScheduleVersion));

    // The target name's length is the first body field: claim 2^31 bytes.
    bad = good;
    bad[12 + 3] = 0x80;
    reseal(bad);
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "big.mks"),
                      "big.mks: target name is 2147483657 bytes long, more than 65536 (corrupt file)");

    // The weight count follows the fixed-size header fields; claim far more weights than bytes left.
    const size_t weights_at = 12 + 4 + 9 /* "h200-test" */ + 4 + 8 + 8 + 4 + 6 * 8 + 4 /* tensor_cores */ + 7 * 4 + 4 + 4 +
                              4 + 4 + 8 + 4 + 8 + 4 +
                              13 /* "critical-path" */ + 4 + 4;
    bad = good;
    REQUIRE(bad[weights_at] == n_weight_ids(1));
    bad[weights_at] = 0xff;
    bad[weights_at + 1] = 0xff;
    reseal(bad);
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "many.mks"),
                      Catch::StartsWith("many.mks: truncated: 65535 weights need at least 1310700 bytes"));

    bad = good;
    bad.insert(bad.end() - 8, 3, uint8_t(0));
    reseal(bad);
    CHECK_THROWS_WITH(parse_schedule(bad.data(), bad.size(), "long.mks"),
                      "long.mks: 3 unexpected bytes after the last stream");
}

TEST_CASE("the JSON dump names ops, counters and operands", "[cpu]") {
    const auto j = nlohmann::json::parse(schedule_to_json(sample()));
    CHECK(j["version"] == kScheduleVersion);
    CHECK(j["target"]["name"] == "h200-test");
    CHECK(j["config_hash"] == "fedcba9876543210");
    CHECK(j["policy"] == "critical-path");
    CHECK(j["counters"].size() == 2);
    CHECK(j["counters"][0]["step_total"] == 3);
    const auto& b = j["streams"][2]["instructions"][0];
    CHECK(b["op"] == "matvec_add");
    CHECK(b["waits"][0] == nlohmann::json({{"counter", 0}, {"name", "c0"}, {"operand", "partials"}, {"target", 3}}));
    CHECK(b["waits"][1]["operand"] == "output");
    CHECK(b["signals"][0]["name"] == "c1");
    CHECK(b["args"].size() == kMaxArgs);
    CHECK(b["describe"].get<std::string>().rfind("matvec_add", 0) == 0);
    CHECK(j["streams"][1]["instructions"].empty());
    CHECK(j["streams"][0]["instructions"][1]["op"] == "rms_qkv");
}

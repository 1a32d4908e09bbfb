// Inputs found by tests/fuzz/fuzz_schedule (tools/fuzz.sh), fed back as bytes: each once made verify() run for
// seconds and hundreds of MB (OOM for larger values) and must now be refused quickly with a named error.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "models/error.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;

namespace {

std::string verify_summary(const std::vector<uint8_t>& bytes) {
    const auto start = std::chrono::steady_clock::now();
    const std::string summary = verify(parse_schedule(bytes.data(), bytes.size(), "fuzz.mks")).summary();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    return summary;
}

}  // namespace

// attn_partial's `group` (query heads per KV head) fuzzed to 2^31 - 1: verify() built one access per head.
// Fixed in instructions/attn_partial/attn_partial.hpp (heads outside the model are refused) and
// scheduler/verify.cpp (the structure check asks every op's accesses first); scheduler/schedule_file.cpp
// refuses head counts past 4096, so the model's own dims cannot be inflated to fit the group.
TEST_CASE("regression: a fuzzed attn_partial group or head count is refused, not expanded", "[cpu]") {
    // tiny_schedule(1, 0) with one attn_read(0, 8, 12, 16) whose group is 0x7fffffff, through the file format.
    Schedule s = test::tiny_schedule(1, 0);
    Instruction attn = test::attn_read(0, 8, 12, 16);
    AttnPartialArgs a = decode_args<AttnPartialArgs>(attn);
    a.group = 0x7fffffff;
    encode_args(a, attn);
    s.streams[0].push_back(attn);
    std::vector<uint8_t> bytes = serialize_schedule(s);
    CHECK_THAT(verify_summary(bytes), Catch::StartsWith("1 error (structure 1)") &&
                                          Catch::Contains("structure: sm 0 #0: attn_partial: kv head 0 × group "
                                                          "2147483647 (part 0 of 1) is outside the model's 2 heads, 2 KV heads"));
    // The same file claiming 2^31 + 2 heads and KV heads, so that the group would fit them.
    s.dims.n_heads = s.dims.n_kv_heads = 0x80000002u;
    bytes = serialize_schedule(s);
    CHECK_THROWS_WITH(parse_schedule(bytes.data(), bytes.size(), "fuzz.mks"),
                      "fuzz.mks: model dims claim 2147483650 heads, 2147483650 KV heads of head_dim 2, more than 4096 "
                      "(corrupt file)");
}

// matvec_add's n_rows fuzzed to 2^31 + 16: the page plan made one tile per page of rows, past the weight's
// 64 rows. Fixed in instructions/common/page_plan.cpp (rows outside the weight are refused; a page never
// holds "0 rows" by truncation) and scheduler/schedule_file.cpp (weights of more than 2^24 rows are refused).
TEST_CASE("regression: a fuzzed matvec row range is refused by its page plan", "[cpu]") {
    // tiny_schedule(1, 0) with one matvec(0, 4, 8, 4) whose n_rows is 0x80000010, through the file format.
    Schedule s = test::tiny_schedule(1, 0);
    Instruction mv = test::matvec(0, 4, 8, 4);
    MatvecAddArgs a = decode_args<MatvecAddArgs>(mv);
    a.n_rows = 0x80000010u;
    encode_args(a, mv);
    s.streams[0].push_back(mv);
    const std::vector<uint8_t> bytes = serialize_schedule(s);
    CHECK_THAT(verify_summary(bytes), Catch::Contains("pages: sm 0 #0 (matvec_add w=7 rows [8, 2147483672) k=4): page "
                                                      "plan: rows [8, 2147483672) of weight 7 are outside its 64 rows"));
}

// rms_qkv's projection weight fuzzed to kNoWeight (0xffffffff): its weights() list dropped it as an absent
// optional weight, so the id check passed and the page plan indexed the formats with it (SEGV under ASan,
// tools/fuzz.sh 600, fuzz_schedule after 299k executions). Fixed in instructions/rms_qkv/rms_qkv.hpp: only
// the bias and QK-norm weights are optional.
TEST_CASE("regression: a fuzzed rms_qkv weight id of kNoWeight is a structure finding, not a crash", "[cpu]") {
    for (bool norm : {false, true}) {
        Schedule s = test::tiny_schedule(1, 1);
        Instruction k = test::kv_write(false, 0, 0, 2);
        RmsQkvArgs a = decode_args<RmsQkvArgs>(k);
        (norm ? a.norm : a.weight) = kNoWeight;
        encode_args(a, k);
        s.streams[0].push_back(test::signal(k, 0));
        s.counters[0].step_total = 1;
        const VerifyReport report = verify(s);
        CHECK_FALSE(report.ok);
        CHECK_THAT(report.summary(), Catch::Contains("structure") && Catch::Contains("4294967295"));
    }
}

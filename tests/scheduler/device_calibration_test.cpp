// Calibration files: a round trip, malformed files refused naming the key, and a measured constant
// changing the device model's price by the hand-computed amount.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "scheduler/device_calibration.hpp"
#include "scheduler/simulate.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;
using Catch::Matchers::Contains;

namespace {

// Every constant, each a distinct non-round value, with one observation.
Calibration full_calibration() {
    Calibration c;
    c.device = "Test GPU";
    c.sms = 7;
    double v = 1.375;
    for (const CalibrationKey& k : calibration_keys()) {
        c.constants.push_back({k.key, v, k.unit, "a test value"});
        v = v * 1.5 + 0.25;
    }
    c.observations.push_back({"sm_clock_ghz", 1.755, "GHz", "clock64 against globaltimer"});
    return c;
}

std::string with_constant(const std::string& key, const std::string& entry) {
    return R"({"mk_calibration": 1, "device": "d", "sms": 2, "emulated": false, "constants": {")" + key + "\": " +
           entry + "}}";
}

}  // namespace

TEST_CASE("calibration: a file round trip", "[cpu]") {
    const Calibration c = full_calibration();
    const Calibration back = parse_calibration(calibration_to_json(c), "rt.json");
    CHECK(back.device == c.device);
    CHECK(back.sms == 7);
    CHECK_FALSE(back.emulated);
    REQUIRE(back.constants.size() == calibration_keys().size());
    for (size_t i = 0; i < c.constants.size(); ++i) {
        CHECK(back.constants[i].key == c.constants[i].key);
        CHECK(back.constants[i].value == c.constants[i].value);  // JSON keeps a double exactly
        CHECK(back.constants[i].unit == c.constants[i].unit);
        CHECK(back.constants[i].how == "a test value");
    }
    REQUIRE(back.observations.size() == 1);
    CHECK(back.observations[0].value == 1.755);

    // Applied: each key lands in its own member (the model's or the target's), the rest unchanged.
    DeviceModel m = device_model_h200();
    Target t = target_h200();
    const uint32_t sms = t.n_sms;
    apply_calibration(back, m, t);
    for (const CalibratedValue& v : c.constants) CHECK(calibration_value(v.key, m, t) == v.value);
    CHECK(t.n_sms == sms);
    CHECK(m.code.signal_fences == device_model_h200().code.signal_fences);

    // Written to a file and read back by path; an emulated one says so.
    Calibration emulated = c;
    emulated.emulated = true;
    const std::string path = "device_calibration_test.json";
    std::ofstream(path) << calibration_to_json(emulated);
    CHECK(read_calibration(path).emulated);
    std::string report;
    Target t2 = target_h200();
    calibrated_device_model(path, t2, report);
    CHECK_THAT(report, Contains("measured on the CUDA emulator"));
    CHECK(t2.hop_ns == calibration_value("hop_ns", m, t));
    std::remove(path.c_str());
}

TEST_CASE("calibration: malformed files are refused naming the file and key", "[cpu]") {
    auto refused = [](const std::string& text, const std::string& needle) {
        INFO(text);
        CHECK_THROWS_WITH(parse_calibration(text, "cal.json"), Contains("cal.json") && Contains(needle));
    };
    refused("{\"mk_calibration\": 1,", "not valid JSON");
    refused("[1, 2]", "not a JSON object");
    refused(R"({"device": "d", "sms": 2, "emulated": false, "constants": {}})", "mk_calibration");
    refused(R"({"mk_calibration": 2, "device": "d", "sms": 2, "emulated": false, "constants": {}})", "mk_calibration");
    refused(R"({"mk_calibration": 1, "sms": 2, "emulated": false, "constants": {}})", "device");
    refused(R"({"mk_calibration": 1, "device": "d", "sms": -2, "emulated": false, "constants": {}})", "sms");
    refused(R"({"mk_calibration": 1, "device": "d", "sms": 2, "constants": {}})", "emulated");
    refused(R"({"mk_calibration": 1, "device": "d", "sms": 2, "emulated": false})", "constants: missing");
    refused(R"({"mk_calibration": 1, "device": "d", "sms": 2, "emulated": false, "constants": {}, "extra": 1})",
            "extra: unknown key");
    refused(with_constant("fence_nanos", R"({"value": 800})"), "constants.fence_nanos: unknown key");
    refused(with_constant("fence_ns", R"({"unit": "ns"})"), "constants.fence_ns.value: missing");
    refused(with_constant("fence_ns", R"({"value": "800"})"), "constants.fence_ns.value: missing or not a number");
    refused(with_constant("fence_ns", R"({"value": -1})"), "constants.fence_ns: -1 is not a valid latency");
    refused(with_constant("bandwidth_gbs", R"({"value": 0})"), "constants.bandwidth_gbs: 0 is not a valid rate");
    refused(with_constant("fence_ns", R"({"value": 800, "unit": "us"})"), "constants.fence_ns.unit: 'us'");
    refused(with_constant("fence_ns", R"({"value": 800, "note": "x"})"), "constants.fence_ns.note: unknown key");
    refused(with_constant("fence_ns", "800"), "constants.fence_ns: not an object");
    CHECK_THROWS_WITH(read_calibration("no-such-calibration.json"), Contains("no-such-calibration.json: cannot open"));

    // A latency of 0 is valid (a fence may cost nothing); a subset of the constants is a valid file.
    const Calibration c = parse_calibration(with_constant("fence_ns", R"({"value": 0})"), "cal.json");
    REQUIRE(c.constants.size() == 1);
    CHECK(c.constants[0].value == 0.0);
}

TEST_CASE("calibration: a measured fence re-prices a signalling instruction by fences x the change", "[cpu]") {
    // Hand-computed: an instruction's serial path holds signal_fences fences when it signals, none otherwise, so
    // doubling fence_ns (800 -> 1600 assumed) adds exactly signal_fences x 800 ns to it and nothing to a waiter.
    Schedule s = tiny_schedule(2, 1);
    s.target.bandwidth_gbs = 2.0;
    Instruction signaller = matvec(0, 16, 16, 4), waiter = matvec(16, 16, 0, 4);
    signal(signaller, 0);
    wait(waiter, 0, 1);
    const DeviceModel assumed = device_model_h200();
    const double fence = assumed.fence_ns;
    REQUIRE(fence == 800.0);
    Calibration c;
    c.device = "Test GPU";
    c.sms = 2;
    c.constants.push_back({"fence_ns", 2 * fence, "ns", "doubled"});
    DeviceModel calibrated = assumed;
    Target target = s.target;
    apply_calibration(c, calibrated, target);
    for (uint32_t fences : {1u, 2u, 3u}) {
        DeviceModel a = assumed, b = calibrated;
        a.code.signal_fences = b.code.signal_fences = fences;
        const DeviceTime before = device_instruction_time(s, signaller, 0, a);
        const DeviceTime after = device_instruction_time(s, signaller, 0, b);
        CHECK(after.overhead_ns - before.overhead_ns == Approx(fences * fence));
        CHECK(after.consume_ns == before.consume_ns);
        CHECK(after.load_ns == before.load_ns);
        CHECK(device_instruction_time(s, waiter, 0, b).overhead_ns ==
              device_instruction_time(s, waiter, 0, a).overhead_ns);
    }
    // hop_ns lives in the target: a measured hop moves the step boundary by exactly the change.
    c.constants = {{"hop_ns", 1234.5, "ns", "measured"}};
    Target hop = s.target;
    DeviceModel unused = assumed;
    apply_calibration(c, unused, hop);
    CHECK(device_step_boundary_ns(hop, assumed) - device_step_boundary_ns(s.target, assumed) ==
          Approx(1234.5 - s.target.hop_ns));
}

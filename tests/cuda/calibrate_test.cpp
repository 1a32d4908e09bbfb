// The calibration micro-kernels (runtime/cuda/calibrate.cu) end to end (tag [cuda][calibrate]): every constant the
// device cost model prices is measured once, with a valid value that survives the file's round trip, and the file
// says whether the emulator measured it. On a GPU (mk_cuda_tests, tools/gpu-check.sh's calibrate stage) the values
// must also be physically plausible for a Hopper-class device: wide bounds that only a broken kernel misses.
#include <catch2/catch.hpp>

#include <map>

#include "runtime/cuda/calibrate.hpp"

namespace mk {

TEST_CASE("calibration micro-kernels measure every constant", "[cuda][calibrate]") {
    const Calibration c = run_calibration();
#if defined(MK_CUDA_EMU)
    CHECK(c.emulated);
#else
    CHECK_FALSE(c.emulated);
#endif
    CHECK(c.sms > 0);
    std::map<std::string, double> measured;
    for (const CalibratedValue& v : c.constants) {
        INFO(v.key << " = " << v.value << " " << v.unit << ": " << v.how);
        CHECK(measured.count(v.key) == 0);
        CHECK_FALSE(v.how.empty());
        measured[v.key] = v.value;
    }
    for (const CalibrationKey& k : calibration_keys()) CHECK(measured.count(k.key) == 1);
    const Calibration back = parse_calibration(calibration_to_json(c), "calibration");
    REQUIRE(back.constants.size() == c.constants.size());
    for (size_t i = 0; i < c.constants.size(); ++i) CHECK(back.constants[i].value == c.constants[i].value);
    CHECK(back.emulated == c.emulated);
    if (c.emulated) return;  // the emulator's values time fibers, not a device
    for (const CalibratedValue& v : c.constants) WARN(v.key << " = " << v.value << " " << v.unit);
    for (const CalibratedValue& v : c.observations) WARN(v.key << " = " << v.value << " " << v.unit);
    // Orders of magnitude (H100 microbenchmarks put an L2 hit at ~150-300 ns, DRAM at ~400-700 ns): a value
    // outside these bounds is a kernel the compiler reshaped or a timer misread, not a device.
    CHECK(measured["l2_load_ns"] > 20);
    CHECK(measured["l2_load_ns"] < measured["dram_load_ns"]);
    CHECK(measured["dram_load_ns"] < 5000);
    CHECK(measured["pcie_read_ns"] > measured["l2_load_ns"]);
    CHECK(measured["barrier_ns"] < 1000);
    CHECK(measured["hop_ns"] > 50);
    CHECK(measured["hop_ns"] < 20000);
    CHECK(measured["bandwidth_gbs"] > 500);
    CHECK(measured["bandwidth_gbs"] < 20000);
    CHECK(measured["sm_cols_per_ns"] >= measured["warp_cols_smem_per_ns"]);
}

}  // namespace mk

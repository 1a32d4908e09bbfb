// A calibration file: the device cost model's constants as micro-kernels measured them on one device
// (`mk devices --calibrate FILE`, runtime/cuda/calibrate.cu), read back by `mk inspect|schedule --calibration FILE`
// in place of device_model_h200()'s and the target's assumed values. JSON, one entry per constant:
//   {"mk_calibration": 1, "device": "NVIDIA H200", "sms": 132, "emulated": false,
//    "constants": {"fence_ns": {"value": 812.5, "unit": "ns", "how": "..."}, ...},
//    "observations": {"sm_clock_ghz": {...}, ...}}
// "constants" may hold any subset of the known keys (the rest stay assumed); "observations" are measured and
// reported but priced by nothing. A file measured on the CUDA emulator says "emulated": true.
#pragma once
#include <string>
#include <vector>

#include "scheduler/device_cost.hpp"
#include "scheduler/target.hpp"

namespace mk {

// One measured value.
struct CalibratedValue {
    std::string key;    // a calibration_keys() name (constants) or any name (observations)
    double value = 0;
    std::string unit;   // as calibration_keys() gives it, for constants
    std::string how;    // how it was measured, in a sentence
};

struct Calibration {
    std::string device;  // the device's name as the CUDA runtime reports it
    uint32_t sms = 0;
    bool emulated = false;  // measured on the CUDA emulator: the numbers time the emulator, not a device
    std::vector<CalibratedValue> constants, observations;
};

// A constant the model prices: its key, unit, and whether it is a rate (> 0) or a latency (>= 0).
struct CalibrationKey {
    const char* key;
    const char* unit;
    bool rate;
};
const std::vector<CalibrationKey>& calibration_keys();

// Throws mk::Error "FILE: ..." naming the key for a malformed file, an unknown key, a missing or invalid value.
Calibration read_calibration(const std::string& path);
Calibration parse_calibration(const std::string& text, const std::string& path);
std::string calibration_to_json(const Calibration& c);  // validates as the reader does (throws on a bad constant)

// The constants' assumed values replaced by the measured ones (DeviceModel's and the target's bandwidth_gbs, hop_ns).
void apply_calibration(const Calibration& c, DeviceModel& m, Target& t);
// The value a key has in the model and target (what a calibration would replace).
double calibration_value(const std::string& key, const DeviceModel& m, const Target& t);

// device_model_h200() with FILE's constants applied to it and to `t` (none when path is empty). `report` gets one
// line per constant (key, assumed, measured) and, for a file measured on the emulator, a warning: its values are
// used (so a rehearsal exercises the whole path) but time the emulator, so the prediction is no device's.
DeviceModel calibrated_device_model(const std::string& path, Target& t, std::string& report);

}  // namespace mk

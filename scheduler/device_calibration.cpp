// Calibration files: the device model's constants by key, read and written as JSON, checked key by key.
#include "scheduler/device_calibration.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "models/error.hpp"

namespace mk {

namespace {

using nlohmann::ordered_json;  // read in the file's order, so a round trip keeps it

// Where each key lives: a DeviceModel member or a Target member.
struct KeySlot {
    CalibrationKey key;
    double DeviceModel::*model = nullptr;
    double Target::*target = nullptr;
};

const std::vector<KeySlot>& key_slots() {
    static const std::vector<KeySlot> slots = {
        {{"l2_load_ns", "ns", false}, &DeviceModel::l2_load_ns},
        {{"dram_load_ns", "ns", false}, &DeviceModel::dram_load_ns},
        {{"byte_load_ns", "ns", false}, &DeviceModel::byte_load_ns},
        {{"barrier_ns", "ns", false}, &DeviceModel::barrier_ns},
        {{"fence_ns", "ns", false}, &DeviceModel::fence_ns},
        {{"system_fence_ns", "ns", false}, &DeviceModel::system_fence_ns},
        {{"pcie_read_ns", "ns", false}, &DeviceModel::pcie_read_ns},
        {{"warp_reduce_ns", "ns", false}, &DeviceModel::warp_reduce_ns},
        {{"warp_cols_l2_per_ns", "columns/ns", true}, &DeviceModel::warp_cols_l2_per_ns},
        {{"warp_cols_smem_per_ns", "columns/ns", true}, &DeviceModel::warp_cols_smem_per_ns},
        {{"sm_cols_per_ns", "columns/ns", true}, &DeviceModel::sm_cols_per_ns},
        {{"shuffle_ns", "ns", false}, &DeviceModel::shuffle_ns},
        {{"exp_ns", "ns", false}, &DeviceModel::exp_ns},
        {{"sm_tensor_gflops", "GFLOP/s", true}, &DeviceModel::sm_tensor_gflops},
        {{"sm_issue_per_ns", "instructions/ns", true}, &DeviceModel::sm_issue_per_ns},
        {{"l2_gbs", "GB/s", true}, &DeviceModel::l2_gbs},
        {{"bandwidth_gbs", "GB/s", true}, nullptr, &Target::bandwidth_gbs},
        {{"hop_ns", "ns", false}, nullptr, &Target::hop_ns},
    };
    return slots;
}

const KeySlot* find_slot(const std::string& key) {
    for (const KeySlot& s : key_slots())
        if (key == s.key.key) return &s;
    return nullptr;
}

std::string known_keys() {
    std::string list;
    for (const KeySlot& s : key_slots()) list += (list.empty() ? "" : ", ") + std::string(s.key.key);
    return list;
}

// A constant's value must be finite; a rate positive, a latency not negative (a fence can cost nothing).
void check_constant(const std::string& path, const std::string& key, double value) {
    const KeySlot* slot = find_slot(key);
    if (!slot) fail("{}: constants.{}: unknown key (known: {})", path, key, known_keys());
    if (!std::isfinite(value) || value < 0 || (slot->key.rate && value == 0))
        fail("{}: constants.{}: {} is not a valid {} ({})", path, key, value, slot->key.rate ? "rate" : "latency",
             slot->key.rate ? "finite and > 0" : "finite and >= 0");
}

std::vector<CalibratedValue> read_values(const ordered_json& object, const std::string& path, const std::string& section,
                                         bool constants) {
    std::vector<CalibratedValue> out;
    if (!object.is_object()) fail("{}: {}: not an object", path, section);
    for (const auto& [key, entry] : object.items()) {
        const std::string where = section + "." + key;
        if (!entry.is_object()) fail("{}: {}: not an object with a value", path, where);
        for (const auto& [field, unused] : entry.items())
            if (field != "value" && field != "unit" && field != "how") fail("{}: {}.{}: unknown key", path, where, field);
        if (!entry.contains("value") || !entry["value"].is_number()) fail("{}: {}.value: missing or not a number", path, where);
        CalibratedValue v{key, entry["value"].get<double>(), "", ""};
        if (entry.contains("unit")) {
            if (!entry["unit"].is_string()) fail("{}: {}.unit: not a string", path, where);
            v.unit = entry["unit"].get<std::string>();
        }
        if (entry.contains("how")) {
            if (!entry["how"].is_string()) fail("{}: {}.how: not a string", path, where);
            v.how = entry["how"].get<std::string>();
        }
        if (constants) {
            check_constant(path, key, v.value);
            const std::string unit = find_slot(key)->key.unit;
            if (!v.unit.empty() && v.unit != unit) fail("{}: {}.unit: '{}', expected '{}'", path, where, v.unit, unit);
            v.unit = unit;
        } else if (!std::isfinite(v.value)) {
            fail("{}: {}.value: not finite", path, where);
        }
        out.push_back(v);
    }
    return out;
}

}  // namespace

const std::vector<CalibrationKey>& calibration_keys() {
    static const std::vector<CalibrationKey> keys = [] {
        std::vector<CalibrationKey> k;
        for (const KeySlot& s : key_slots()) k.push_back(s.key);
        return k;
    }();
    return keys;
}

Calibration parse_calibration(const std::string& text, const std::string& path) {
    const ordered_json j = ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", path);
    if (!j.is_object()) fail("{}: not a JSON object", path);
    for (const auto& [key, unused] : j.items())
        if (key != "mk_calibration" && key != "device" && key != "sms" && key != "emulated" && key != "constants" &&
            key != "observations")
            fail("{}: {}: unknown key (known: mk_calibration, device, sms, emulated, constants, observations)", path, key);
    if (!j.contains("mk_calibration") || j["mk_calibration"] != 1)
        fail("{}: mk_calibration: missing or not 1 (not a calibration file of this version)", path);
    Calibration c;
    if (!j.contains("device") || !j["device"].is_string()) fail("{}: device: missing or not a string", path);
    c.device = j["device"].get<std::string>();
    if (!j.contains("sms") || !j["sms"].is_number_unsigned()) fail("{}: sms: missing or not a count", path);
    c.sms = j["sms"].get<uint32_t>();
    if (!j.contains("emulated") || !j["emulated"].is_boolean()) fail("{}: emulated: missing or not true/false", path);
    c.emulated = j["emulated"].get<bool>();
    if (!j.contains("constants")) fail("{}: constants: missing", path);
    c.constants = read_values(j["constants"], path, "constants", true);
    if (j.contains("observations")) c.observations = read_values(j["observations"], path, "observations", false);
    return c;
}

Calibration read_calibration(const std::string& path) {
    std::ifstream in(path);
    if (!in) fail("{}: cannot open the calibration file", path);
    std::stringstream text;
    text << in.rdbuf();
    return parse_calibration(text.str(), path);
}

std::string calibration_to_json(const Calibration& c) {
    auto values = [](const std::vector<CalibratedValue>& list) {
        ordered_json o = ordered_json::object();
        for (const CalibratedValue& v : list) o[v.key] = {{"value", v.value}, {"unit", v.unit}, {"how", v.how}};
        return o;
    };
    for (const CalibratedValue& v : c.constants) check_constant("calibration", v.key, v.value);
    ordered_json j = {{"mk_calibration", 1},   {"device", c.device},
                      {"sms", c.sms},          {"emulated", c.emulated},
                      {"constants", values(c.constants)}, {"observations", values(c.observations)}};
    return j.dump(2) + "\n";
}

void apply_calibration(const Calibration& c, DeviceModel& m, Target& t) {
    for (const CalibratedValue& v : c.constants) {
        const KeySlot* slot = find_slot(v.key);
        if (!slot) fail("calibration: constants.{}: unknown key", v.key);
        if (slot->model) m.*(slot->model) = v.value;
        else t.*(slot->target) = v.value;
    }
    if (!c.constants.empty()) m.name += " (calibrated on " + c.device + (c.emulated ? ", emulated)" : ")");
}

double calibration_value(const std::string& key, const DeviceModel& m, const Target& t) {
    const KeySlot* slot = find_slot(key);
    if (!slot) fail("calibration: unknown key '{}'", key);
    return slot->model ? m.*(slot->model) : t.*(slot->target);
}

DeviceModel calibrated_device_model(const std::string& path, Target& t, std::string& report) {
    DeviceModel m = device_model_h200();
    report.clear();
    if (path.empty()) return m;
    const Calibration c = read_calibration(path);
    const DeviceModel assumed_model = m;
    const Target assumed_target = t;
    apply_calibration(c, m, t);
    report = fmt::format("calibration {}: {} of {} constants measured on {} ({} SMs)\n", path, c.constants.size(),
                         calibration_keys().size(), c.device, c.sms);
    if (c.emulated)
        report += fmt::format("warning: {} was measured on the CUDA emulator: its values time the emulator, not a "
                              "device, so the prediction below is no device's\n", path);
    report += fmt::format("{:<22} {:>12} {:>12} {:>8}  {}\n", "constant", "assumed", "measured", "ratio", "unit");
    for (const CalibrationKey& k : calibration_keys()) {
        const double before = calibration_value(k.key, assumed_model, assumed_target);
        const double after = calibration_value(k.key, m, t);
        const bool measured = std::any_of(c.constants.begin(), c.constants.end(),
                                          [&](const CalibratedValue& v) { return v.key == k.key; });
        report += measured ? fmt::format("{:<22} {:>12.4g} {:>12.4g} {:>8.2f}  {}\n", k.key, before, after,
                                         before > 0 ? after / before : 0.0, k.unit)
                           : fmt::format("{:<22} {:>12.4g} {:>12} {:>8}  {}\n", k.key, before, "-", "-", k.unit);
    }
    for (const CalibratedValue& v : c.observations)
        report += fmt::format("{:<22} {:>12} {:>12.4g} {:>8}  {} (observed, not priced)\n", v.key, "-", v.value, "-",
                              v.unit);
    return m;
}

}  // namespace mk

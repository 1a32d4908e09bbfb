// schedule_to_json: a readable dump of a schedule. Tolerates invalid opcodes and counter ids (it is
// how one looks at a schedule the verifier rejected).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "instructions/registry.hpp"
#include "scheduler/schedule_fields.hpp"
#include "scheduler/schedule_file.hpp"

namespace mk {

namespace {

using nlohmann::ordered_json;

const char* operand_name(uint16_t operand) {
    static const char* const kNames[] = {"input", "kv_cache", "partials", "output", "logits", "token"};
    return operand < sizeof(kNames) / sizeof(kNames[0]) ? kNames[operand] : "unknown";
}

ordered_json instruction_json(const Schedule& s, const Instruction& ins, uint32_t index) {
    const bool valid = is_valid_opcode(ins.opcode);
    auto counter_name = [&](uint16_t c) { return c < s.counters.size() ? s.counters[c].name : std::string("?"); };
    ordered_json waits = ordered_json::array(), signals = ordered_json::array(), args = ordered_json::array();
    for (uint32_t w = 0; w < ins.n_waits && w < kMaxWaits; ++w)
        waits.push_back({{"counter", ins.waits[w].counter},
                         {"name", counter_name(ins.waits[w].counter)},
                         {"operand", operand_name(ins.waits[w].operand)},
                         {"target", ins.waits[w].target}});
    for (uint32_t k = 0; k < ins.n_signals && k < kMaxSignals; ++k)
        signals.push_back({{"counter", ins.signals[k].counter},
                           {"name", counter_name(ins.signals[k].counter)},
                           {"delta", ins.signals[k].delta}});
    for (uint32_t a : ins.args) args.push_back(a);
    return {{"index", index},
            {"op", valid ? op_info(ins.opcode).name : fmt::format("invalid({})", ins.opcode)},
            {"seq", ins.seq},
            {"n_pages", ins.n_pages},
            {"flags", ins.flags},
            {"waits", std::move(waits)},
            {"signals", std::move(signals)},
            {"args", std::move(args)},
            {"describe", valid ? op_info(ins.opcode).describe(ins) : std::string()}};
}

// One JSON value per field of the schedule's field list (schedule_fields.hpp).
struct JsonFields {
    const Schedule& s;
    ordered_json& out;
    template <typename F>
    ordered_json value(std::string_view name, const F& field) const {
        if constexpr (std::is_same_v<F, std::vector<std::vector<Instruction>>>) {
            ordered_json streams = ordered_json::array();
            for (uint32_t sm = 0; sm < field.size(); ++sm) {
                ordered_json list = ordered_json::array();
                for (uint32_t i = 0; i < field[sm].size(); ++i) list.push_back(instruction_json(s, field[sm][i], i));
                streams.push_back({{"sm", sm}, {"instructions", std::move(list)}});
            }
            return streams;
        } else if constexpr (requires { field.size(); typename F::value_type; } && !std::is_same_v<F, std::string>) {
            ordered_json list = ordered_json::array();
            for (uint32_t id = 0; id < field.size(); ++id) {
                ordered_json record = {{"id", id}};
                visit_record(field[id], [&](const char* key, const auto& f) { record[key] = f; });
                list.push_back(std::move(record));
            }
            return list;
        } else if constexpr (std::is_same_v<F, uint64_t>) {
            // A 64-bit hash as a string: JSON readers that hold numbers as doubles would round it.
            if (name == "config_hash") return fmt::format("{:016x}", field);
            return field;
        } else {
            return field;
        }
    }
    template <typename F>
    void operator()(std::string_view section, std::string_view name, const F& field) const {
        ordered_json& into = section.empty() ? out : out[std::string(section)];
        into[std::string(name)] = value(name, field);
    }
};

}  // namespace

std::string schedule_to_json(const Schedule& s) {
    ordered_json out = {{"version", kScheduleVersion}};
    visit_schedule_fields(s, JsonFields{s, out});
    // Names come from files: replace invalid UTF-8 rather than throw.
    return out.dump(1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace mk

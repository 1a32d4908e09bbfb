// schedule_to_json: a readable dump of a schedule. Tolerates invalid opcodes and counter ids (it is
// how one looks at a schedule the verifier rejected).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "instructions/registry.hpp"
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

}  // namespace

std::string schedule_to_json(const Schedule& s) {
    const Target& t = s.target;
    const ModelDims& d = s.dims;
    ordered_json weights = ordered_json::array(), buffers = ordered_json::array(), counters = ordered_json::array(),
                 streams = ordered_json::array();
    for (uint32_t id = 0; id < s.weights.size(); ++id) {
        const WeightFormat& f = s.weights[id];
        weights.push_back(
            {{"id", id}, {"dtype", f.dtype}, {"rows", f.rows}, {"cols", f.cols}, {"row_bytes", f.row_bytes}});
    }
    for (const BufferInfo& b : s.buffers)
        buffers.push_back({{"name", b.name}, {"offset", b.offset}, {"bytes", b.bytes}, {"layout", b.layout}});
    for (uint32_t c = 0; c < s.counters.size(); ++c)
        counters.push_back({{"id", c}, {"name", s.counters[c].name}, {"step_total", s.counters[c].step_total}});
    for (uint32_t sm = 0; sm < s.streams.size(); ++sm) {
        ordered_json list = ordered_json::array();
        for (uint32_t i = 0; i < s.streams[sm].size(); ++i) list.push_back(instruction_json(s, s.streams[sm][i], i));
        streams.push_back({{"sm", sm}, {"instructions", std::move(list)}});
    }
    ordered_json out = {
        {"version", kScheduleVersion},
        {"target",
         {{"name", t.name},
          {"n_sms", t.n_sms},
          {"smem_bytes", t.smem_bytes},
          {"page_bytes", t.page_bytes},
          {"n_pages", t.n_pages},
          {"bandwidth_gbs", t.bandwidth_gbs},
          {"sm_gflops", t.sm_gflops},
          {"hop_ns", t.hop_ns},
          {"link_gbs", t.link_gbs},
          {"link_ns", t.link_ns},
          {"instruction_ns", t.instruction_ns}}},
        {"dims",
         {{"n_layers", d.n_layers},
          {"d_model", d.d_model},
          {"n_heads", d.n_heads},
          {"n_kv_heads", d.n_kv_heads},
          {"head_dim", d.head_dim},
          {"d_ff", d.d_ff},
          {"vocab", d.vocab},
          {"norm_eps", d.norm_eps},
          {"qkv_bias", d.qkv_bias},
          {"qk_norm", d.qk_norm}}},
        // A string: JSON readers that hold numbers as doubles would round a 64-bit hash.
        {"config_hash", fmt::format("{:016x}", s.config_hash)},
        {"tp_size", s.tp_size},
        {"rank_arena_bytes", s.rank_arena_bytes},
        {"policy", s.policy},
        {"n_attn_parts", s.n_attn_parts},
        {"n_lm_blocks", s.n_lm_blocks},
        {"arena_bytes", s.arena_bytes},
        {"logits_off", s.logits_off},
        {"token_off", s.token_off},
        {"weights", std::move(weights)},
        {"buffers", std::move(buffers)},
        {"counters", std::move(counters)},
        {"streams", std::move(streams)},
    };
    // Names come from files: replace invalid UTF-8 rather than throw.
    return out.dump(1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace mk

// The one list of a Schedule's fields, in .mks order: the .mks writer and reader (schedule_file.cpp) and the
// JSON dump (schedule_json.cpp) visit it, so a new field is written, read and shown from one line here.
// A visitor takes (section, name, field) for every field: section is "target", "dims" or "" (top level);
// a field is an integer, float, double, string, or a vector of records (visit_record) or of streams.
// Appending or reordering fields changes the .mks format: bump kScheduleVersion (schedule.hpp).
#pragma once
#include <type_traits>

#include "scheduler/schedule.hpp"

namespace mk {

// S is Schedule (reading) or const Schedule (writing, dumping).
template <typename S, typename Visit>
void visit_schedule_fields(S& s, Visit&& v) {
    auto& t = s.target;
    v("target", "name", t.name);
    v("target", "n_sms", t.n_sms);
    v("target", "smem_bytes", t.smem_bytes);
    v("target", "page_bytes", t.page_bytes);
    v("target", "n_pages", t.n_pages);
    v("target", "bandwidth_gbs", t.bandwidth_gbs);
    v("target", "sm_gflops", t.sm_gflops);
    v("target", "hop_ns", t.hop_ns);
    v("target", "instruction_ns", t.instruction_ns);
    v("target", "link_gbs", t.link_gbs);
    v("target", "link_ns", t.link_ns);
    v("target", "tensor_cores", t.tensor_cores);
    auto& d = s.dims;
    v("dims", "n_layers", d.n_layers);
    v("dims", "d_model", d.d_model);
    v("dims", "n_heads", d.n_heads);
    v("dims", "n_kv_heads", d.n_kv_heads);
    v("dims", "head_dim", d.head_dim);
    v("dims", "d_ff", d.d_ff);
    v("dims", "vocab", d.vocab);
    v("dims", "norm_eps", d.norm_eps);
    v("dims", "qkv_bias", d.qkv_bias);
    v("dims", "qk_norm", d.qk_norm);
    v("dims", "kv_type", d.kv_type);
    v("", "config_hash", s.config_hash);
    v("", "tp_size", s.tp_size);
    v("", "rank_arena_bytes", s.rank_arena_bytes);
    v("", "policy", s.policy);
    v("", "n_attn_parts", s.n_attn_parts);
    v("", "n_lm_blocks", s.n_lm_blocks);
    v("", "weights", s.weights);
    v("", "buffers", s.buffers);
    v("", "arena_bytes", s.arena_bytes);
    v("", "logits_off", s.logits_off);
    v("", "token_off", s.token_off);
    v("", "prefill_tokens", s.prefill_tokens);
    v("", "all_logits", s.all_logits);
    v("", "tokens_off", s.tokens_off);
    v("", "counters", s.counters);
    v("", "streams", s.streams);
}

// The fields of one record of the vectors above (R: WeightFormat, BufferInfo or CounterInfo, maybe const),
// visited as (name, field).
template <typename R, typename Visit>
void visit_record(R& r, Visit&& v) {
    using T = std::remove_const_t<R>;
    if constexpr (std::is_same_v<T, WeightFormat>) {
        v("dtype", r.dtype), v("rows", r.rows), v("cols", r.cols), v("row_bytes", r.row_bytes);
    } else if constexpr (std::is_same_v<T, BufferInfo>) {
        v("name", r.name), v("offset", r.offset), v("bytes", r.bytes), v("layout", r.layout);
    } else {
        static_assert(std::is_same_v<T, CounterInfo>, "a record of the schedule's field list");
        v("name", r.name), v("step_total", r.step_total);
    }
}

}  // namespace mk

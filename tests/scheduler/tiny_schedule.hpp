// Hand-built schedules for the scheduler tests: a one-layer toy model whose instructions touch
// chosen arena words and KV slots, so a test states exactly which accesses conflict.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/matvec_add/matvec_add.hpp"
#include "instructions/rms_qkv/rms_qkv.hpp"
#include "scheduler/schedule.hpp"

namespace mk::test {

inline ModelDims tiny_dims() {
    ModelDims d;
    d.n_layers = 1;
    d.d_model = 16;
    d.n_heads = 2;
    d.n_kv_heads = 2;
    d.head_dim = 2;
    d.d_ff = 16;
    d.vocab = 16;
    return d;
}

// A schedule shell: n_sms empty streams, the toy model's weights, n_counters counters.
inline Schedule tiny_schedule(uint32_t n_sms, uint32_t n_counters) {
    Schedule s;
    s.target.name = "tiny";
    s.target.n_sms = n_sms;
    s.target.page_bytes = 64;
    s.target.n_pages = 4;
    s.target.smem_bytes = 5 * 64;
    s.dims = tiny_dims();
    s.weights.resize(n_weight_ids(1));
    for (WeightFormat& w : s.weights) w = {0 /* F32 */, 64, 16, 64};  // 64 rows of 16 fp32: one row a page
    s.arena_bytes = 256;
    s.buffers.push_back({"words", 0, 256, "(64) fp32 test words"});
    for (uint32_t c = 0; c < n_counters; ++c) s.counters.push_back({fmt::format("c{}", c), 0});
    s.streams.resize(n_sms);
    return s;
}

// matvec_add reading words [in, in + n_in) and writing words [out, out + n_out) of the arena.
inline Instruction matvec(uint32_t in, uint32_t n_in, uint32_t out, uint32_t n_out) {
    Instruction i{};
    i.opcode = uint16_t(Opcode::matvec_add);
    encode_args(MatvecAddArgs{layer_weight_id(0, LayerWeight::wo), out, n_out, n_in, 4 * in, 0}, i);
    return i;
}

// rms_qkv of kind k or v: reads words [in, in + n_in), writes KV slot `head` at the step's position.
inline Instruction kv_write(bool v_cache, uint32_t head, uint32_t in, uint32_t n_in) {
    Instruction i{};
    i.opcode = uint16_t(Opcode::rms_qkv);
    RmsQkvArgs a{0,
                 v_cache ? 2u : 1u,
                 head,
                 1,
                 4 * in,
                 0,
                 layer_weight_id(0, v_cache ? LayerWeight::wv : LayerWeight::wk),
                 layer_weight_id(0, LayerWeight::attn_norm),
                 kNoWeight,
                 kNoWeight,
                 n_in,
                 2};
    encode_args(a, i);
    return i;
}

// attn_partial over KV slot `head` (rows 0..pos of both caches): reads word q, writes words o and ml, ml+1.
inline Instruction attn_read(uint32_t head, uint32_t q, uint32_t o, uint32_t ml) {
    Instruction i{};
    i.opcode = uint16_t(Opcode::attn_partial);
    // head_dim 1, group 1, one part: q word q_off + 4 * head, o word o_off + 4 * head, ml words ml_off + 8 * head.
    encode_args(AttnPartialArgs{0, head, 0, 1, 4 * (q - head), 4 * (o - head), 4 * ml - 8 * head, 1, 1}, i);
    return i;
}

inline Instruction& wait(Instruction& i, uint16_t counter, uint32_t target, Operand operand = Operand::input) {
    i.waits[i.n_waits++] = {counter, uint16_t(operand), target};
    return i;
}

inline Instruction& signal(Instruction& i, uint16_t counter, uint16_t delta = 1) {
    i.signals[i.n_signals++] = {counter, delta};
    return i;
}

// Numbers seq in stream-major order unless set, fills n_pages from the page plans and step totals from the signals.
void finish(Schedule& s, bool number_seq = true);

}  // namespace mk::test

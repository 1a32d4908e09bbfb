// The scheduler's front door: a model (its config and weight formats) and a target in, a schedule out.
#pragma once
#include <vector>

#include "models/model.hpp"
#include "scheduler/assign.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/tensor_parallel.hpp"

namespace mk {

struct SyntheticSpec;  // models/synthetic.hpp: only synthetic_weight_formats needs it

ModelDims model_dims(const ModelConfig& config);
// The model's tensor behind each weight id (absent optional weights are views with data == nullptr).
std::vector<const TensorView*> weight_views(const Model& model);
// Weight formats by weight id (absent optional weights have rows == 0).
std::vector<WeightFormat> weight_formats(const Model& model);

// The formats weight_formats gives for the synthetic model `spec` once written and loaded, from its shape
// alone: schedules for shapes too big to write (llama-3.1-70b) compile without the file.
std::vector<WeightFormat> synthetic_weight_formats(const SyntheticSpec& spec);

// The repacked layout the CUDA backend streams with bulk copies: every matrix row stride rounded up to
// `align` bytes (GGUF's 20- and 34-byte blocks leave rows unaligned). Vectors (one row) are unchanged.
// bind_weights makes the padded copies, so the CPU backend runs the same layout in tests.
std::vector<WeightFormat> padded_row_formats(std::vector<WeightFormat> formats, uint32_t align);

// `weights` by schedule weight id: weight_formats, or tp_weight_formats for tp > 1 (then padded for CUDA).
// `kv_type`: how the schedule's KV cache stores K and V (ModelDims::kv_type).
Schedule compile_schedule(const ModelConfig& config, const std::vector<WeightFormat>& weights, const Target& target,
                          Policy policy, uint32_t tp = 1, KvType kv_type = KvType::f32);
// The prefill step for chunks of up to n_tok tokens (its logits: the chunk's last token's, or every token's);
// `weights`, `tp` and `kv_type` as for compile_schedule (a program's decode and prefill schedules agree on them).
Schedule compile_prefill_schedule(const ModelConfig& config, const std::vector<WeightFormat>& weights,
                                  const Target& target, Policy policy, uint32_t n_tok, bool all_logits,
                                  KvType kv_type = KvType::f32, uint32_t tp = 1);

}  // namespace mk

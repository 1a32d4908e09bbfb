// Binds a schedule to a model's weights: the WeightRef table ops index by weight id (checked
// against the formats the schedule was compiled for), and the RoPE frequency table.
#pragma once
#include <vector>

#include "instructions/op_context.hpp"
#include "models/model.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct ModelWeights {
    std::vector<WeightRef> refs;                // by weight id
    std::vector<float> rope_inv_freq;           // (head_dim / 2) fp32
    std::vector<std::vector<float>> converted;  // F32 copies of small non-F32 vectors (norms, biases)
    std::vector<std::vector<uint8_t>> padded;   // copies: wider row stride (repacked layout), TP column slices
};

// Throws mk::Error when the schedule does not fit the model: config hash, or any weight's
// dtype/shape differing from what the schedule was compiled for. A schedule whose row stride is wider
// than the model's (padded_row_formats) gets padded copies of those weights.
//
// `bind_only` (by weight id, optional): weights outside it are not copied or converted but bound to a
// placeholder with the schedule's format, for a device that runs only some ranks' streams and never reads
// the others' weights (one tensor-parallel rank per GPU would otherwise copy every rank's column slices).
ModelWeights bind_weights(const Model& model, const Schedule& schedule, const std::vector<bool>* bind_only = nullptr);

// By weight id: whether an instruction of streams [first_stream, first_stream + n_streams) names it
// (OpInfo::weights; invalid opcodes and ids are skipped, prepare_schedule reports them): the bind_only of
// a device that runs only those streams.
std::vector<bool> weights_read_by(const Schedule& schedule, uint32_t first_stream, uint32_t n_streams);

// Angular frequency of each rotary pair: base^(-2i/head_dim) / factor_i.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace mk

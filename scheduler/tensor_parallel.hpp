// Tensor parallelism, Megatron-style: rank k owns heads [k*H/N, (k+1)*H/N) (Q/K/V rows, O-projection
// columns), a slice of the FFN (gate/up rows, down columns) and a slice of the vocabulary (LM-head rows).
// A TP schedule is one combined schedule over all ranks (docs/distributed.md): its dims are one rank's
// share with the N ranks' layers stacked (rank k's layer l is layer k * n_layers + l), and its weight ids
// name slices of the model's weights. With N = 1 everything here is the identity.
#pragma once
#include <cstdint>
#include <vector>

#include "instructions/op_types.hpp"

namespace mk {

// Which part of which model weight a schedule weight id stands for.
struct WeightSlice {
    uint32_t source = kNoWeight;  // the model's weight id; kNoWeight: absent
    uint32_t row_begin = 0, n_rows = 0;
    uint32_t col_begin = 0, n_cols = 0;
};

// Throws mk::Error saying why the model cannot be split `tp` ways (KV heads, FFN width, block alignment
// of the column-split weights).
void check_tp(const ModelDims& model, const std::vector<WeightFormat>& model_formats, uint32_t tp);
// One rank's share with the ranks' layers stacked.
ModelDims tp_rank_dims(const ModelDims& model, uint32_t tp);
// By schedule weight id (n_weight_ids(tp_rank_dims(model, tp).n_layers) of them).
std::vector<WeightSlice> tp_weight_slices(const ModelDims& model, const std::vector<WeightFormat>& model_formats,
                                          uint32_t tp);
// The formats of those slices (a column slice's rows are re-packed, so its row_bytes shrinks).
std::vector<WeightFormat> tp_weight_formats(const std::vector<WeightFormat>& model_formats, const ModelDims& model,
                                            uint32_t tp);

// The first vocabulary row of rank k's LM-head slice (k = tp gives the vocabulary size).
uint32_t tp_vocab_begin(uint32_t vocab, uint32_t tp, uint32_t rank);

}  // namespace mk

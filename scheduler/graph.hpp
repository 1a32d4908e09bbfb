// The decode step as a DAG: every instruction of one step in its sequential order (seq), the
// counter group it signals and the groups it waits for, and the activation-arena layout.
// Block sizes come from the target (SM count, pages), never from model dimensions. With tensor
// parallelism the graph holds every rank's nodes (each runs on its rank's SMs) and the exchanges.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "instructions/op_types.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct GroupDep {
    uint32_t group = 0;
    Operand operand = Operand::input;  // what the wait guards
    bool previous_step = false;        // wait for the group's signals of the previous step only
};

struct GraphNode {
    Instruction ins{};  // opcode, args, n_pages and seq; waits and signals come from counters.cpp
    uint32_t group = 0;  // the group this node belongs to (it signals the group's counter by 1)
    uint32_t rank = 0;   // the tensor-parallel rank whose SMs run it
    std::vector<GroupDep> deps;
    Cost cost;
};

struct GraphGroup {
    std::string name;  // e.g. "qkv.L3"
    uint32_t n_members = 0;
};

// The layout (dims: tp_rank_dims(model, tp), weights, arena) becomes the schedule's as it is.
struct Graph : ScheduleLayout {
    std::vector<GraphNode> nodes;  // index == seq
    std::vector<GraphGroup> groups;
};

// Places buffer `name` ((bytes) described by `layout`) at the arena's next kBufferAlignBytes boundary and
// grows the arena; returns its offset. The decode and prefill graphs lay out their buffers with it.
uint64_t add_arena_buffer(Graph& graph, const std::string& name, uint64_t bytes, const std::string& layout);
// Repeats the buffers laid out so far (rank 0's) in `tp` regions of rank_arena_bytes each (named "rK.<name>" when
// tp > 1); returns each region's first byte. Fails when the arena passes 4 GiB.
std::vector<uint32_t> replicate_rank_regions(Graph& graph, uint32_t tp);

// `dims` are the model's; `weights` are by schedule weight id (tp_weight_formats for tp > 1).
Graph build_decode_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target,
                         uint32_t tp = 1);

// The prefill step for a chunk of up to n_tok tokens (prefill_graph.cpp): the batched ops, the LM head for the
// chunk's last token or, with all_logits, for every token. `dims` and `weights` as for build_decode_graph.
Graph build_prefill_graph(const ModelDims& dims, const std::vector<WeightFormat>& weights, const Target& target,
                          uint32_t n_tok, bool all_logits, uint32_t tp = 1);

// Q, K or V (kind 0, 1, 2 of rms_qkv's blocks) of schedule layer L: its output rows and the ids of its matrix,
// bias and QK-norm weight (kNoWeight where the model has none; V never has a norm).
struct QkvWeights {
    uint32_t rows, matrix, bias, norm;
};
QkvWeights qkv_weights(const Graph& graph, uint32_t layer, uint32_t kind);

// Blocks of b covering a (block counts and sizes of the graphs, which stay under 2^32).
constexpr uint32_t div_up(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

// Rows per block so that a matrix of `rows` rows spreads over about `n_sms` blocks (at least 16), a multiple of `align`.
uint32_t block_rows(uint32_t rows, uint32_t n_sms, uint32_t align);

}  // namespace mk

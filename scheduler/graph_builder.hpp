// What the decode and prefill graph builders (graph.cpp, prefill_graph.cpp) share: the graph under construction
// over one rank's share of the model, its counter groups (named per rank with tensor parallelism) and its nodes,
// each with its page plan's page count and its cost.
#pragma once
#include <string>
#include <vector>

#include <fmt/format.h>

#include "scheduler/graph.hpp"
#include "scheduler/tensor_parallel.hpp"

namespace mk {

class GraphBuilderBase {
protected:
    GraphBuilderBase(const ModelDims& model, const std::vector<WeightFormat>& weights, const Target& target, uint32_t tp)
        : target_(target), tp_(tp), model_(model) {
        graph_.dims = tp_rank_dims(model, tp);
        graph_.tp_size = tp;
        graph_.weights = weights;
        plan_inputs_ = plan_inputs(target, graph_.weights.data());
    }

    uint32_t group(const std::string& name) {
        graph_.groups.push_back({name, 0});
        return uint32_t(graph_.groups.size() - 1);
    }
    // Rank k's group name: plain without tensor parallelism.
    std::string name(uint32_t rank, const std::string& what) const {
        return tp_ == 1 ? what : fmt::format("r{}.{}", rank, what);
    }

    // The opcode comes from Op and the arguments must be Op::Args: add<MatvecAddOp>(k, RmsGateUpArgs{...}) does not compile.
    template <typename Op>
    void add(uint32_t rank, const typename Op::Args& args, uint32_t group, std::vector<GroupDep> deps) {
        GraphNode node;
        node.ins = make_instruction<Op>(args);
        node.ins.seq = uint32_t(graph_.nodes.size());
        node.ins.n_pages = uint8_t(Op::page_plan(node.ins, plan_inputs_).n_pages);
        node.cost = Op::cost(node.ins, graph_.dims, graph_.weights.data());
        node.group = group;
        node.rank = rank;
        node.deps = std::move(deps);
        graph_.groups[group].n_members++;
        graph_.nodes.push_back(std::move(node));
    }

    const Target& target_;
    const uint32_t tp_;
    const ModelDims model_;  // the whole model's (graph_.dims is one rank's share)
    Graph graph_;
    PlanInputs plan_inputs_;
};

}  // namespace mk

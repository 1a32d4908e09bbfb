// The host-side op registry, generated from instructions/ops.def: each op's name, the regions it
// reads and writes, its page plan, its cost and its CPU implementation.
#pragma once
#include <string>
#include <vector>

#include "instructions/op_context.hpp"

namespace mk {

// The op test's types (instructions/op_reference.hpp): each spec declares its float64 reference and cases.
struct OpBuffers;
struct OpCase;
struct Expected;

struct OpInfo {
    const char* name;
    Effects (*effects)(const Instruction&);
    std::vector<Access> (*accesses)(const Instruction&, const ModelDims&);
    std::vector<uint32_t> (*weights)(const Instruction&);  // the weight ids it reads
    PagePlan (*page_plan)(const Instruction&, const PlanInputs&);
    Cost (*cost)(const Instruction&, const ModelDims&, const WeightFormat* weights);
    void (*run_cpu)(const Instruction&, OpContext&);
    std::string (*describe)(const Instruction&);
};

// The instruction of `Op` with these arguments (opcode from the type: an Args of another op does not compile).
template <typename Op>
Instruction make_instruction(const typename Op::Args& args) {
    Instruction ins{};
    ins.opcode = uint16_t(Op::opcode);
    encode_args(args, ins);
    return ins;
}

// Weight ids with the optional ones (kNoWeight) left out.
std::vector<uint32_t> present(std::initializer_list<uint32_t> ids);

bool is_valid_opcode(uint16_t opcode);
// False for the ops of ops.def's MK_HOST_OP lines (the prefill ops): the CUDA backends cannot run them.
bool has_device_code(uint16_t opcode);
// Throws mk::Error when the instruction names a weight id outside `formats` or one the model lacks
// (every other spec function indexes the formats by these ids, so check this first).
void check_weight_ids(const Instruction& ins, const std::vector<WeightFormat>& formats);
// Throws mk::Error for an opcode outside the op list.
const OpInfo& op_info(uint16_t opcode);
inline const OpInfo& op_info(Opcode opcode) { return op_info(uint16_t(opcode)); }

}  // namespace mk

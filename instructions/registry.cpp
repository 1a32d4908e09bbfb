// The host op registry: one table entry per line of ops.def.
#include "instructions/registry.hpp"

#include "instructions/all_ops.hpp"
#include "models/error.hpp"

#include <type_traits>

namespace mk {

namespace {
const OpInfo kOps[] = {
#define MK_OP(snake, Pascal) \
    {#snake, &Pascal##Op::effects, &Pascal##Op::accesses, &Pascal##Op::weights, &Pascal##Op::page_plan, &Pascal##Op::cost, &Pascal##Op::run_cpu, &Pascal##Op::describe},
#include "instructions/ops.def"
#undef MK_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == size_t(Opcode::count));
const bool kDeviceCode[] = {
#define MK_OP(snake, Pascal) true,
#define MK_HOST_OP(snake, Pascal) false,
#include "instructions/ops.def"
#undef MK_HOST_OP
#undef MK_OP
};
static_assert(sizeof(kDeviceCode) / sizeof(kDeviceCode[0]) == size_t(Opcode::count));
// Each spec names its own opcode and Args: a folder wired to the wrong line of ops.def does not compile.
#define MK_OP(snake, Pascal)                                                                                     \
    static_assert(Pascal##Op::opcode == Opcode::snake, #Pascal "Op::opcode is not Opcode::" #snake);              \
    static_assert(std::is_same_v<Pascal##Op::Args, Pascal##Args>, #Pascal "Op::Args is not " #Pascal "Args");
#include "instructions/ops.def"
#undef MK_OP
}  // namespace

std::vector<uint32_t> present(std::initializer_list<uint32_t> ids) {
    std::vector<uint32_t> out;
    for (uint32_t id : ids)
        if (id != kNoWeight) out.push_back(id);
    return out;
}

void check_weight_ids(const Instruction& ins, const std::vector<WeightFormat>& formats) {
    for (uint32_t id : op_info(ins.opcode).weights(ins)) {
        if (id >= formats.size()) fail("weight id {} is outside the schedule's {} weights", id, formats.size());
        if (!formats[id].present()) fail("weight {} is absent from the model", id);
    }
}

bool is_valid_opcode(uint16_t opcode) { return opcode < uint16_t(Opcode::count); }

bool has_device_code(uint16_t opcode) { return is_valid_opcode(opcode) && kDeviceCode[opcode]; }

const OpInfo& op_info(uint16_t opcode) {
    if (!is_valid_opcode(opcode)) fail("unknown opcode {}", opcode);
    return kOps[opcode];
}

}  // namespace mk

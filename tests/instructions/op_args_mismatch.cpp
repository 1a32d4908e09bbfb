// Must not compile (ctest instructions.op_args_mismatch): an instruction of one op from another op's
// arguments. The opcode comes from the op type, and the arguments must be that op's Args.
#include "instructions/all_ops.hpp"

mk::Instruction wrong_args() { return mk::make_instruction<mk::MatvecAddOp>(mk::RmsGateUpArgs{}); }

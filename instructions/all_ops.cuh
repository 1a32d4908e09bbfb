// Every op's CUDA implementation, for the code that dispatches on the opcode (one include per line of ops.def).
#pragma once
#include "instructions/attn_partial/attn_partial.cuh"
#include "instructions/attn_reduce/attn_reduce.cuh"
#include "instructions/embed/embed.cuh"
#include "instructions/matvec_add/matvec_add.cuh"
#include "instructions/reduce_add/reduce_add.cuh"
#include "instructions/rms_gate_up/rms_gate_up.cuh"
#include "instructions/rms_lm_head/rms_lm_head.cuh"
#include "instructions/rms_qkv/rms_qkv.cuh"
#include "instructions/sample/sample.cuh"
#include "instructions/transfer/transfer.cuh"
// Prefill ops.
#include "instructions/attn_rows/attn_rows.cuh"
#include "instructions/embed_rows/embed_rows.cuh"
#include "instructions/matmul_add/matmul_add.cuh"
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.cuh"
#include "instructions/rms_lm_head_rows/rms_lm_head_rows.cuh"
#include "instructions/rms_qkv_rows/rms_qkv_rows.cuh"
#include "instructions/last_token_row/last_token_row.cuh"

namespace mk {

// Runs one instruction with the team and tiles given (an unknown opcode, or one without device code, was
// refused on the host). Force-inlined: with attention instantiated for both KV-cache types ptxas outlined it
// (a 344-byte stack frame and all 16 named barriers in the interpreter; ctest cuda.ptxas.interpreter_kernel).
template <class Tiles>
__device__ __forceinline__ void run_device_op(const Instruction& ins, const DeviceOpContext& ctx, const Team& team, Tiles& tiles) {
    switch (Opcode(ins.opcode)) {
#define MK_OP(snake, Pascal)                            \
    case Opcode::snake:                                 \
        Pascal##Device::run(ins, ctx, team, tiles);     \
        break;
#define MK_HOST_OP(snake, Pascal)
#include "instructions/ops.def"
#undef MK_HOST_OP
#undef MK_OP
    default:
        break;
    }
}

// What the resident kernel's loader fetches into L2 ahead of the consumers besides weight tiles: an op whose
// device code reads memory that is already final when the step starts (attention's older K/V rows) defines
// `prefetch(ins, ctx)`; the others have nothing to fetch. A hint only: no op's result depends on it.
template <class OpDevice>
__device__ inline void prefetch_if_defined(const Instruction& ins, const DeviceOpContext& ctx) {
    if constexpr (requires { OpDevice::prefetch(ins, ctx); }) OpDevice::prefetch(ins, ctx);
}
__device__ inline void prefetch_device_op(const Instruction& ins, const DeviceOpContext& ctx) {
    switch (Opcode(ins.opcode)) {
#define MK_OP(snake, Pascal)                              \
    case Opcode::snake:                                   \
        prefetch_if_defined<Pascal##Device>(ins, ctx);    \
        break;
#define MK_HOST_OP(snake, Pascal)
#include "instructions/ops.def"
#undef MK_HOST_OP
#undef MK_OP
    default:
        break;
    }
}

// The instruction's effects as its spec declares them (a peer's memory, the step's token).
__device__ inline Effects device_effects(const Instruction& ins) {
    switch (Opcode(ins.opcode)) {
#define MK_OP(snake, Pascal) \
    case Opcode::snake:      \
        return Pascal##Op::effects(ins);
#define MK_HOST_OP(snake, Pascal)
#include "instructions/ops.def"
#undef MK_HOST_OP
#undef MK_OP
    default:
        return {};
    }
}

}  // namespace mk

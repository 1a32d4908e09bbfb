// Every op's spec, for the code that builds one table entry per line of ops.def (the registries).
#pragma once
#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/attn_reduce/attn_reduce.hpp"
#include "instructions/embed/embed.hpp"
#include "instructions/matvec_add/matvec_add.hpp"
#include "instructions/reduce_add/reduce_add.hpp"
#include "instructions/rms_gate_up/rms_gate_up.hpp"
#include "instructions/rms_lm_head/rms_lm_head.hpp"
#include "instructions/rms_qkv/rms_qkv.hpp"
#include "instructions/sample/sample.hpp"
#include "instructions/transfer/transfer.hpp"
// Prefill ops.
#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/embed_rows/embed_rows.hpp"
#include "instructions/matmul_add/matmul_add.hpp"
#include "instructions/rms_gate_up_rows/rms_gate_up_rows.hpp"
#include "instructions/rms_lm_head_rows/rms_lm_head_rows.hpp"
#include "instructions/rms_qkv_rows/rms_qkv_rows.hpp"

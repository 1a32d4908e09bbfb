// The resident CUDA interpreter's cost model (runtime/cuda/interpreter.cu): what one instruction costs on
// an SM given the device's constants and the structure of today's device code. The simulator uses it when
// asked (`mk inspect --cost device`); the ideal model (bytes at the SM's share of bandwidth) stays the default.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "instructions/encoding.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

// How the device code is built. These are facts about the code, not measurements: change them in the
// same commit as the code they describe (device_model_h200() holds today's).
struct KernelStructure {
    uint32_t consumer_warps = 7;      // warps 1..7 of 8 (interpreter.cu: kInterpreterThreads)
    bool rows_across_tiles = true;    // rows dealt to warps over the instruction's tiles, a warp releasing each tile
                                      // when its own rows are done (before issue 20: per tile, then a team barrier)
    uint32_t matvec_input_smem_cols = 3052;  // matvec_add stages inputs of up to this many fp32 in shared memory
                                             // (the scratch beside 13 pages and the queue: 4,076 floats, less 1,024
                                             // for reductions), else L2
    uint32_t record_loads = 0;          // dependent global loads before the waits: the record (1 before the loader
                                        // staged each instruction in a shared-memory queue)
    uint32_t wait_dependent_loads = 1;  // dependent global loads per counter wait: the counter (its target is staged;
                                        // before the queue: its SyncSlots entry, then the counter)
    uint32_t decode_byte_loads = 0;     // LDG.E.U8 executed by one decode_args (word loads since issue 20)
    uint32_t signal_fences = 1;         // fences before a signal lands (the release add's own)
    uint32_t barriers_per_instruction = 2;  // team barriers around the op (wait published, stores done)
    // attn_partial: a warp takes 32 positions a trip, one lane each, all heads of the group per K/V row;
    // a trip is 4 rounds of K loads (unrolled by 4 of 16 float4) and 4 of V rows (8 in flight), 2 x 5 reduction
    // shuffles and 32 broadcasts.
    bool attn_heads_serial = false;        // the group's query heads one after another (before issue 20: true)
    uint32_t attn_positions_per_trip = 224;  // positions in flight per trip over the team (before: 7)
    uint32_t attn_trip_load_rounds = 8;    // dependent K/V load rounds per trip (before: 1)
    uint32_t attn_trip_shuffles = 42;      // dependent shuffles per trip (before: 5, the score's warp sum)
    bool attn_kv_prefetched = true;        // the loader prefetches the chunk's K/V rows into L2 an instruction ahead,
                                           // so a trip's load rounds hit L2 (before: DRAM, the weights evict them)
    // attn_rows (prefill, attn_rows.cuh): the team stages up to 32 positions' K and V rows in the scratch per block
    // of a round of its (query, head) slots, 4 a warp (attn_rows.hpp). Per block a busy warp issues: per head dim of
    // the scores, 1 LDS of K, 4 FFMA and a quarter of 4 slots' 16-byte q loads (6); per slot ~30 for the online
    // softmax (2 x 5 shuffles with their max and add, 2 expf, the masks) plus its accumulators' rescale; per key, 4
    // SHFL of the weights and the loop's 2, and per lane dim an LDS and 4 FFMA. The staging: ~4 per 32 elements
    // (load, store, addressing) over the team, in dependent load rounds of attn_rows_stage_rows rows a warp. (Before:
    // every (query, head) read its K and V rows from L2 itself.)
    uint32_t attn_rows_score_per_dim = 6;
    uint32_t attn_rows_softmax_per_slot = 30;
    uint32_t attn_rows_key_instructions = 6;
    uint32_t attn_rows_key_per_lane_dim = 5;
    uint32_t attn_rows_stage_per_32 = 4;
    // Each block but a round's first was prefetched into L1 during the block before (prefetch.global.L1) where its
    // rows fit (attn_rows_prefetched): its bytes stream while that block computes, and its staging's load rounds hit
    // L1 (before: round trips to L2 a block).
    bool attn_rows_prefetch = true;
    // attn_rows on tensor cores (attn_rows_mma.cuh: head_dim a multiple of 16 up to 64): 16 (query, head) pairs a
    // warp, blocks of 16 positions. Per block a busy warp issues S's and P V's MMAs (4 x head_dim / 16 x (1 + the
    // cache's halves)), their fragments' LDS (8 x head_dim / 16 x halves), the O rescale (head_dim / 2 FMUL) and
    // ~220 more: its 8 S values a lane (mask, scale, max, expf, sum: ~17 each), its 2 rows' shuffles and
    // corrections (~20 each), P's split into bf16 halves (24), the loop. The staging over the team: per item (two
    // values of K along the dims or of V along the positions), ~11 instructions (addresses, load, stores), and 8
    // more to split an fp32 cache's pair into bf16 halves; K and V in two dependent load rounds. (Before: the
    // CUDA-core path above, which stays for other heads.)
    bool attn_rows_mma = true;
    uint32_t attn_mma_block_instructions = 220;
    uint32_t attn_mma_stage_item = 11;
    uint32_t attn_mma_stage_split = 8;
    uint32_t attn_mma_stage_load_rounds = 2;
    // The resident kernel's team scratch on the H200, in floats: what 227 KiB leave beside 13 pages of 16 KiB and the
    // kernel's state and queue (matvec_input_smem_cols is this less 1,024 for reductions).
    uint32_t scratch_floats = 4076;
    double wait_backoff_max_ns = 256;   // a waiter's __nanosleep grows to this: polls land late by up to it (was 1024)
    uint32_t token_system_fences = 0;   // post_token: system-scope fences on the critical path (before: 3; the gate's
                                        // release now precedes the host's copy)
    uint32_t token_pcie_reads = 1;      // post_token: reads of host memory (the cancel flag)
    bool stream_across_steps = false;   // the loader fills step s+1's first pages while step s finishes
    uint32_t queue_depth = 8;           // instructions the loader may stage ahead of the consumers (0: no bound;
                                        // before the shared-memory queue only the pages bounded it)
    // Prefill rows ops on MMA tiles (rows_math.cuh): instructions a warp issues for one 32-column k-step of one
    // 8-token chunk, per tile by weight format, and once per chunk for its inputs. Counted from the source (a SASS
    // count on the H200 is the check).
    uint32_t mma_step_instructions_bf16 = 8;   // 2 LDS.128, 4 HMMA, addressing
    uint32_t mma_step_instructions_f16 = 106;  // + 2 HMMA, 8 weight pairs split (12 each: 2 HADD2.F32, 2 IADD + 2 LOP
                                               // to round hi, 2 FADD for lo, 2 packs of 2 ALU)
    // The block formats read quants the team staged as bf16 (below): 2 LDS.128 (rows g and g + 8), 2 LDS (scales),
    // 8 moves into the fragments, 4 HMMA, 4 FFMA; Q4_1 + 2 LDS (mins) and 6 more (min x input sum). Unpacked by each
    // warp (before), they took 80, 80 and 88.
    uint32_t mma_step_instructions_q8_0 = 20;
    uint32_t mma_step_instructions_q4_0 = 20;
    uint32_t mma_step_instructions_q4_1 = 28;
    // The team's staging of one tile's 32-column block (rows_math.cuh's stage_block), once for all chunks: 64 pieces
    // of 8 quants, 2 warp instructions' worth of lanes, each ~45 (the table's page address, the quants' loads and
    // unpacking by bits: 8 pairs of 5 ALU and 2 FADD less shared work, one STS.128, the row's scale and its
    // conversion); and two team barriers a block (before: no warp reads the last block; after: all see this one).
    uint32_t mma_stage_step_instructions = 90;
    uint32_t mma_stage_step_conversions = 2;  // the scales (Q4_1: and mins) from f16, 8 lanes of each of 2 warps
    uint32_t mma_stage_step_barriers = 2;     // a k-step, per pass (not per tile)
    // 8 inputs: 16 loads and 16 FMUL (RMS-normed), 4 pair splits of 6; their prefetch 6 (the address, the bound's
    // compare, 2 prefetches: x and the norm's w; was 56 without)
    uint32_t mma_chunk_step_instructions = 62;
    uint32_t mma_chunk_step_sums_q4_1 = 4;      // Q4_1: the block's input sums, 4 HMMA against ones
    // Of those, the conversions (I2F, F2FP: cvt.rn.bf16x2.f32), which issue at sm_convert_per_ns, a fraction of the
    // rate of the rest: per chunk, the inputs' 4 pair splits (2 each); per tile, none (every format's weights are
    // unpacked by bits; before, Q8_0 took 24 a tile: 16 I2F and 8 cvt; F16 16; the first Q4 code 8).
    uint32_t mma_chunk_step_conversions = 8;
    uint32_t mma_step_conversions = 0;
    // How many 32-column k-steps ahead a warp prefetches its inputs into L1 while it issues a k-step's MMAs
    // (rows_math.cuh's chunk_inputs): 2 in passes of one chunk a warp, 1 in passes of two (L1 holds ~28 KiB beside
    // the pages: 7 warps' lines of 3 k-steps of one chunk, 21 KiB, or of 2 k-steps of two, 28 KiB: at its size, so
    // the model is optimistic there). A k-step's loads then hit L1 (l1_load_ns) once its prefetch is back from L2
    // (l2_load_ns, overlapping that many k-steps); 0 (before 2026-12-07): each k-step of each chunk waited an L2 round
    // trip before its MMAs, hidden only by the other warps on the same scheduler (7 warps on 4: 2 on the busiest).
    // Either way a pass's k-steps form a chain that bounds the op beside its bytes, flops and issue.
    uint32_t mma_prefetch_k_steps = 2;
};

// Device constants, each with its source ("assumed until measured": tools/gpu-check.sh must confirm it).
struct DeviceModel {
    std::string name;
    double l1_load_ns = 0;         // one dependent global load served by L1
    double l2_load_ns = 0;         // one dependent global load served by L2
    double dram_load_ns = 0;       // one dependent global load that misses L2
    double byte_load_ns = 0;       // issue cost of one more LDG.E.U8 from a line already in L1
    double barrier_ns = 0;         // a named barrier of the consumer team
    double fence_ns = 0;           // a device-scope fence with the team's stores outstanding
    double system_fence_ns = 0;    // a system-scope fence (host-mapped stores outstanding)
    double pcie_read_ns = 0;       // a load from pinned host memory
    double warp_reduce_ns = 0;     // five shuffles: one warp's row dot summed across lanes
    double warp_cols_l2_per_ns = 0;    // columns one warp dots per ns, weights in smem, input from L2
    double warp_cols_smem_per_ns = 0;  // the same, input in shared memory
    double sm_cols_per_ns = 0;     // the SM's issue limit for row dots, all warps together
    double shuffle_ns = 0;         // one dependent SHFL
    double exp_ns = 0;             // the online softmax's two expf and its bookkeeping, per trip
    double sm_tensor_gflops = 0;   // one SM's dense BF16/F16 tensor-core rate (mma.sync, fp32 accumulate)
    double sm_issue_per_ns = 0;    // instructions the SM's 4 schedulers issue per ns, all warps together
    double sm_convert_per_ns = 0;  // warp-wide type conversions (I2F, F2F, F2FP) the SM completes per ns
    double l2_gbs = 0;             // the device's L2 read bandwidth, every SM reading at once (GB/s)
    KernelStructure code;
};

// The H200 constants and the structure of the code as it is at this commit.
DeviceModel device_model_h200();

// One instruction's predicted time on its SM, in parts (ns).
struct DeviceTime {
    double overhead_ns = 0;  // decode, waits' dependent loads, barriers, signal fences: serial on the consumers
    double consume_ns = 0;   // the consumers' work: row dots per tile, attention trips, other ops' bytes
    double prologue_ns = 0;  // the part of consume_ns before the first tile (an RMSNorm pass, staging the input)
    double load_ns = 0;      // the loader filling its pages at the SM's share of bandwidth (overlaps the rest)
    std::vector<uint64_t> tile_bytes;  // the page plan's tiles, in load order (empty: no weight pages)
    double fill_bytes_per_ns = 0;      // the loader's rate for them: 0, the SM's share of DRAM bandwidth
    uint32_t pages = 0;                // pages the instruction holds (tile t in slot t % pages)
    // Alone, with empty pages at its start: the loads overlap the consumers' path. The simulator instead runs
    // each SM's loader ahead across instructions (simulate.cpp), as the kernel does.
    double total_ns() const { return (load_ns > overhead_ns + consume_ns ? load_ns : overhead_ns + consume_ns); }
};

DeviceTime device_instruction_time(const Schedule& s, const Instruction& ins, uint32_t position,
                                   const DeviceModel& m);

// Between two steps: the token hand-off (post_token) and the gate's hop. (The first pages' fill after the
// gate is in the simulated step: its loaders start at the gate unless the code streams across steps.)
double device_step_boundary_ns(const Target& t, const DeviceModel& m);

// What bounds a prefill step with every SM busy at once, each part's total over the step at the whole device's rate:
// rows read from DRAM (the first token block's), bytes read from L2 (later blocks' rows, the activations as often as
// the device code reads them), MMAs as issued (padding and hi/lo products included), the instructions the MMA tiles'
// warps issue (their format unpacking; issue_ms: the slower of their issue and their type conversions' pipe, plus the
// block formats' staging barriers), the MMA tiles' k-step chains (each warp's L2 round trip and MMAs a k-step:
// KernelStructure::mma_prefetch_k_steps) and the other flops. Attention on tensor cores counts its MMAs with the
// rows' and its instructions with the MMA tiles'; its work depends on `position`, the step's last token's (as
// device_instruction_time's).
struct PrefillBounds {
    uint64_t dram_bytes = 0, l2_bytes = 0, tensor_flops = 0, mma_instructions = 0, mma_conversions = 0, other_flops = 0;
    uint64_t team_barriers = 0;
    // The MMA tiles' k-step chains (KernelStructure::mma_prefetch_k_steps), summed over the SMs' instructions.
    double chain_ns = 0;
    double dram_ms = 0, l2_ms = 0, tensor_ms = 0, issue_ms = 0, other_ms = 0, chain_ms = 0;
    const char* bound() const;  // the largest part's name
};
PrefillBounds prefill_bounds(const Schedule& s, const DeviceModel& m, uint32_t position = 511);

// How long a poll that met its target after `waited_ns` of waiting lands late (half the back-off reached).
double device_poll_overshoot_ns(double waited_ns, const DeviceModel& m);

// Consumer warps busy on a tile of `tile_rows` rows in an instruction of `instruction_rows` rows (over all its
// tiles): the proxy the issue tracks per matrix shape.
uint32_t device_warps_busy(uint32_t tile_rows, uint32_t instruction_rows, const KernelStructure& code);

// Per weight matrix of the schedule: rows per tile and consumer warps busy on such a tile.
struct TileShape {
    std::string weight;  // "rows x cols dtype"
    uint32_t rows_per_tile = 0, warps_busy = 0, warps = 0;
    uint64_t tiles = 0;
};
std::vector<TileShape> device_tile_shapes(const Schedule& s, const DeviceModel& m);

}  // namespace mk

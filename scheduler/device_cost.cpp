// The resident interpreter's per-instruction cost: a serial consumer path (decode, waits, barriers,
// signal fences) plus the op's work per tile, overlapped with the loader's page fills.
#include "scheduler/device_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/core.h>

#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"
#include "instructions/device_types.hpp"
#include "instructions/registry.hpp"
#include "models/quant.hpp"

namespace mk {

DeviceModel device_model_h200() {
    DeviceModel m;
    m.name = "h200";
    // Latencies: assumed until measured (orders of magnitude from public H100 microbenchmarks: L2 hits
    // ~260-470 cycles by partition, DRAM ~1000+ cycles, at ~1.75-1.98 GHz).
    m.l2_load_ns = 250;
    m.l1_load_ns = 20;  // assumed until measured: an L1 hit, ~35-40 cycles
    m.dram_load_ns = 650;
    m.byte_load_ns = 2;        // assumed until measured: one issue slot and an L1 hit, ~4 cycles
    m.barrier_ns = 40;         // assumed until measured: bar.sync of 224 threads, ~80 cycles
    m.fence_ns = 800;          // assumed until measured: membar.gl waits for the team's stores to reach L2
    m.system_fence_ns = 1500;  // assumed until measured: membar.sys waits for writes to host memory over PCIe
    m.pcie_read_ns = 1500;     // assumed until measured: a PCIe round trip to pinned host memory
    m.warp_reduce_ns = 60;     // assumed until measured: 5 dependent SHFL of ~23 cycles
    // The review of issue 20: a 16 KiB BF16 tile of one 8192-column row on one warp, input from L2, takes
    // ~2-3 us; 8192 / 2.5 us = 3.3 columns/ns (assumed until measured).
    m.warp_cols_l2_per_ns = 3.3;
    // Assumed until measured: input in shared memory, a 256-column trip is ~3 dependent LDS (~30 cycles each)
    // plus the FMAs, ~60 cycles: 256 / 30 ns = 8.5 columns/ns.
    m.warp_cols_smem_per_ns = 8.5;
    // Assumed until measured: ~40 instructions per warp per 256 columns, 4 schedulers at 1.98 GHz issue
    // 7.9 instructions/ns: 50 columns/ns for the SM (the bandwidth share needs 16.3 BF16 columns/ns).
    m.sm_cols_per_ns = 50;
    m.shuffle_ns = 12;  // assumed until measured: SHFL latency ~23 cycles
    m.exp_ns = 40;      // assumed until measured: two expf (MUFU.EX2 and scaling), ~80 cycles
    // H100/H200 SXM datasheet: 989.4 TFLOPS dense BF16, for wgmma; public Hopper microbenchmarks find the Ampere-style
    // mma.sync (and wmma) at about half of it: 494.7 / 132 SMs (assumed until measured: calibrate.cu's mma chains).
    m.sm_tensor_gflops = 989400.0 / 2 / 132.0;
    // Assumed until measured: 4 schedulers, one instruction a cycle each, at the 1.98 GHz boost clock.
    m.sm_issue_per_ns = 4 * 1.98;
    // Assumed until measured: type conversions at 16 lanes a clock an SM (the CUDA C++ guide's throughput table for
    // compute capability 9.0, "all other type conversions"), half a warp instruction a clock.
    m.sm_convert_per_ns = 16.0 / 32 * 1.98;
    // Assumed until measured (calibrate.cu's L2 fill): public H100 microbenchmarks put L2 reads at ~5.5-7 TB/s with
    // every SM reading; the low end.
    m.l2_gbs = 5500;
    return m;
}

uint32_t device_warps_busy(uint32_t tile_rows, uint32_t instruction_rows, const KernelStructure& code) {
    return std::min(code.rows_across_tiles ? instruction_rows : tile_rows, code.consumer_warps);
}

namespace {

// One warp's row dot of `cols` columns.
double row_ns(uint32_t cols, bool input_in_smem, const DeviceModel& m) {
    return double(cols) / (input_in_smem ? m.warp_cols_smem_per_ns : m.warp_cols_l2_per_ns) + m.warp_reduce_ns;
}

// The consumers' row dots over an instruction's tiles. Per tile: whole rows on ceil(rows / W) rounds of the
// warps, then the team barrier that releases the page. Rows across tiles: the W warps take the instruction's
// rows round robin with no barrier, so ceil(all rows / W) row dots on the busiest warp. The SM's issue rate
// bounds all warps together either way.
double row_dots_ns(const Schedule& s, const PagePlan& plan, bool input_in_smem, const DeviceModel& m) {
    const KernelStructure& c = m.code;
    double ns = 0.0, issue_ns = 0.0;
    uint64_t rows = 0;
    for (const Tile& tile : plan.tiles) {
        const uint32_t cols = s.weights[tile.weight].cols;
        issue_ns += double(tile.n_rows) * cols / m.sm_cols_per_ns;
        rows += tile.n_rows;
        if (!c.rows_across_tiles) {
            const uint32_t rounds = (tile.n_rows + c.consumer_warps - 1) / c.consumer_warps;
            ns += std::max(rounds * row_ns(cols, input_in_smem, m), double(tile.n_rows) * cols / m.sm_cols_per_ns) +
                  m.barrier_ns;
        }
    }
    if (c.rows_across_tiles && !plan.tiles.empty()) {
        const uint64_t rounds = (rows + c.consumer_warps - 1) / c.consumer_warps;
        ns = std::max(double(rounds) * row_ns(s.weights[plan.tiles[0].weight].cols, input_in_smem, m), issue_ns);
    }
    return ns;
}

bool is_row_streaming(const std::string& op) {
    return op == "rms_qkv" || op == "matvec_add" || op == "rms_gate_up" || op == "rms_lm_head";
}

PagePlan plan_of(const Schedule& s, const Instruction& ins) {
    const PlanInputs in = plan_inputs(s.target, s.weights.data());
    return op_info(ins.opcode).page_plan(ins, in);
}

// A prefill rows op's work as rows_math.cuh runs its page plan for a block of n tokens.
struct RowsWork {
    bool mma = false;           // MMA tiles on tensor cores (else whole rows, a warp's scalar dot per row and token)
    bool normed = false;        // RMSNorm of the inputs: a pass over them for the scales first
    uint64_t weight_bytes = 0;  // the plan's tiles
    uint64_t input_reads = 0;   // times the block's inputs are read: once a pass (MMA tiles), once a row (whole rows)
    uint64_t tensor_flops = 0;  // the MMAs issued: 16-row groups, 8-token chunks, mma_products(dtype) a k-step
    uint64_t mma_instructions = 0;  // what the warps issue for them (KernelStructure's per-k-step counts)
    uint64_t mma_conversions = 0;   // of which type conversions
    uint64_t team_barriers = 0;     // the block formats' staging: two a k-step of a pass
    uint64_t l2_bytes = 0;      // activations from L2: the inputs as often as read (and the scales' pass), the outputs
    double chain_ns = 0;        // the passes' k-step chains on the busiest scheduler (mma_k_step_ns)
};

// `op`: the op's name (rms_* norm their inputs).
uint32_t mma_step_instructions(uint32_t dtype, const KernelStructure& c) {
    if (dtype == uint32_t(DType::F16)) return c.mma_step_instructions_f16;
    if (dtype == uint32_t(DType::Q4_0)) return c.mma_step_instructions_q4_0;
    if (dtype == uint32_t(DType::Q4_1)) return c.mma_step_instructions_q4_1;
    return dtype == uint32_t(DType::Q8_0) ? c.mma_step_instructions_q8_0 : c.mma_step_instructions_bf16;
}

// The time an SM takes to issue `instructions` of which `conversions` are type conversions (0 without the rates),
// plus the team barriers its warps wait at.
double mma_issue_ns(uint64_t instructions, uint64_t conversions, uint64_t barriers, const DeviceModel& m) {
    const double issue = m.sm_issue_per_ns > 0 ? double(instructions) / m.sm_issue_per_ns : 0.0;
    return std::max(issue, m.sm_convert_per_ns > 0 ? double(conversions) / m.sm_convert_per_ns : 0.0) +
           double(barriers) * m.barrier_ns;
}

// One pass's k-step on the busiest of the SM's 4 schedulers (rows_math.cuh's mma_row_token_dots): each busy warp
// takes `per_warp` chunks of 8 tokens, each chunk's inputs loaded before its MMAs (`chunk_flops` a k-step: the pass's
// tiles, 2 k16 halves, the format's products): from L1 once their prefetch, issued mma_prefetch_k_steps earlier (1
// for two chunks a warp), is back from L2, else an L2 round trip each. The scheduler's warps interleave, so a k-step
// takes the longer of their MMAs one after another and one warp's own chain. Without a tensor-core rate: 0.
double mma_k_step_ns(uint32_t busy_warps, uint32_t per_warp, double chunk_flops, const DeviceModel& m) {
    if (m.sm_tensor_gflops <= 0 || busy_warps == 0) return 0.0;
    const double chunk_ns = chunk_flops / (m.sm_tensor_gflops / 4);  // on a scheduler's quarter of the tensor cores
    const double on_scheduler = std::ceil(busy_warps / 4.0) * per_warp * chunk_ns;
    const uint32_t ahead = std::min(m.code.mma_prefetch_k_steps, per_warp == 1 ? 2u : 1u);
    const double warp = ahead ? std::max(per_warp * (m.l1_load_ns + chunk_ns), m.l2_load_ns / ahead)
                              : per_warp * (m.l2_load_ns + chunk_ns);
    return std::max(on_scheduler, warp);
}

RowsWork rows_work(const Schedule& s, const std::string& op, const PagePlan& plan, const Cost& cost,
                   const DeviceModel& m) {
    const KernelStructure& code = m.code;
    RowsWork w;
    w.normed = op.rfind("rms_", 0) == 0;
    w.mma = !plan.tiles.empty() && !plan.tiles[0].whole_rows();
    const uint32_t n = cost.token_columns;
    const uint64_t chunk_tokens = 8ull * ((n + 7) / 8);
    for (size_t t = 0; t < plan.tiles.size();) {
        const Tile& first = plan.tiles[t];
        if (!w.mma) {
            w.weight_bytes += first.bytes, w.input_reads += first.n_rows, ++t;
            continue;
        }
        const uint32_t slices = (s.weights[first.weight].cols + first.n_cols - 1) / first.n_cols;
        const uint32_t dtype = s.weights[first.weight].dtype, pass_tiles = std::max(1u, first.pass_tiles);
        const size_t end = std::min(plan.tiles.size(), t + size_t(slices) * pass_tiles);
        const uint64_t k_steps = (s.weights[first.weight].cols + 31) / 32;  // a pass's, over its slices
        const uint64_t chunk_steps = chunk_tokens / 8 * k_steps;
        const bool sums = dtype == uint32_t(DType::Q4_1);  // the input sums: 16 rows of ones, 2 products a k-step
        w.mma_instructions += chunk_steps * (code.mma_chunk_step_instructions + (sums ? code.mma_chunk_step_sums_q4_1 : 0));
        if (sums) w.tensor_flops += 2ull * kMmaGroupRows * s.weights[first.weight].cols * chunk_tokens * 2;
        w.mma_conversions += chunk_steps * code.mma_chunk_step_conversions;
        const bool staged = mma_block_format(dtype);
        if (staged) w.team_barriers += (s.weights[first.weight].cols / 32) * code.mma_stage_step_barriers;  // a pass's
        // The pass's k-step chain: its tiles (a slice's), chunks dealt to the warps round robin.
        const double chunk_flops = 2.0 * kMmaGroupRows * 32 * 8 * pass_tiles * mma_products(dtype) +
                                   (sums ? 2.0 * kMmaGroupRows * 32 * 8 * 2 : 0.0);
        const uint32_t busy = std::min(uint32_t(chunk_tokens / 8), code.consumer_warps);
        const uint32_t per_warp = mma_chunks_per_warp(uint32_t(chunk_tokens), code.consumer_warps);
        w.chain_ns += double(k_steps) * mma_k_step_ns(busy, per_warp, chunk_flops, m);
        for (; t < end; ++t) {
            w.weight_bytes += plan.tiles[t].bytes;
            w.tensor_flops += 2ull * kMmaGroupRows * plan.tiles[t].n_cols * chunk_tokens * mma_products(dtype);
            w.mma_instructions += chunk_tokens / 8 * (plan.tiles[t].n_cols / 32) * mma_step_instructions(dtype, code);
            w.mma_conversions += chunk_tokens / 8 * (plan.tiles[t].n_cols / 32) * code.mma_step_conversions;
            if (staged) {
                const uint32_t per_stage = dtype == uint32_t(DType::Q4_1) ? 2 : 1;  // scales, and Q4_1's mins
                w.mma_instructions += (plan.tiles[t].n_cols / 32) * code.mma_stage_step_instructions;
                w.mma_conversions += (plan.tiles[t].n_cols / 32) * code.mma_stage_step_conversions * per_stage;
            }
        }
        ++w.input_reads;
    }
    const uint32_t cols = plan.tiles.empty() ? 0 : s.weights[plan.tiles[0].weight].cols;
    // rms_lm_head_rows stages a few tokens' normed inputs for whole rows (rows_math.cuh's for_each_row_normed_dot)
    if (!w.mma && op == "rms_lm_head_rows" && !plan.tiles.empty() && stage_normed_rows(n, cols, s.dims))
        w.input_reads = 1;  // the staging pass; the rows read shared memory
    const uint64_t input_bytes = 4ull * n * cols;
    // activation_bytes reads the inputs once and writes the outputs.
    w.l2_bytes = cost.activation_bytes + input_bytes * (std::max<uint64_t>(w.input_reads, 1) - 1 + (w.normed ? 1 : 0));
    return w;
}

// attn_rows as attn_rows.cuh runs it, the chunk starting at `start`: per query block, rounds of the team's
// (query, head) slots, each walking its visible positions in staged blocks. A block costs its staging (its
// dependent load rounds from L2, or its bytes at the SM's L2 share when they take longer, K then V where both do not
// fit at once; a prefetched one: its rounds from L1, or its bytes beyond the block before's compute), its warps'
// instructions (at the SM's issue rate, or one warp's where few are busy), and its barriers.
double attn_rows_ns(const Schedule& s, const Instruction& ins, uint32_t start, const DeviceModel& m) {
    const KernelStructure& c = m.code;
    const auto a = decode_args<AttnRowsArgs>(ins);
    const uint32_t hd = a.head_dim, lane_dims = attn_rows_lane_dims(hd), warps = c.consumer_warps;
    const uint32_t per_round = warps * kAttnRowsSlots;
    const double l2_bytes_per_ns = (m.l2_gbs > 0 ? m.l2_gbs : s.target.bandwidth_gbs) / s.target.n_sms;
    const double warp_issue_per_ns = m.sm_issue_per_ns / 4;  // one scheduler's
    const double per_key = c.attn_rows_key_instructions + c.attn_rows_key_per_lane_dim * lane_dims;
    double ns = 0.0;
    for (uint32_t d0 = 0; d0 < hd; d0 += 32 * lane_dims) {
        const uint32_t dims = std::min(32 * lane_dims, hd - d0);
        const AttnRowsStage st = attn_rows_stage(hd, dims, c.scratch_floats);
        // A staging's dependent load rounds: a lane loads attn_rows_stage_rows of its warp's rows, 32 x lane_dims
        // columns, before storing them.
        const uint32_t batch = attn_rows_stage_rows(lane_dims);
        auto load_rounds = [&](uint32_t rows, uint32_t columns) {
            const uint32_t warp_rows = (rows + warps - 1) / warps;
            return double((warp_rows + batch - 1) / batch) *
                   double((columns + 32 * lane_dims - 1) / (32 * lane_dims));
        };
        auto bytes_ns = [&](uint32_t rows, uint32_t columns) {
            return double(rows) * columns * s.dims.kv_bytes() / l2_bytes_per_ns;
        };
        for (uint32_t b = 0; b < kAttnQueryBlocks; ++b) {
            const QueryBlock block = attn_query_block(a, b);
            const uint32_t pairs = block.count * a.group;
            for (uint32_t round = 0; round < pairs; round += per_round) {
                const uint32_t last = std::min(pairs, round + per_round) - 1;
                const uint32_t span = start + block.begin + last / a.group + 1;
                std::vector<uint32_t> visible;  // each busy warp's last query's
                for (uint32_t p0 = round; p0 <= last; p0 += kAttnRowsSlots)
                    visible.push_back(start + block.begin + std::min(p0 + kAttnRowsSlots - 1, last) / a.group + 1);
                double last_compute_ns = 0.0;
                for (uint32_t base = 0; base < span; base += st.positions) {
                    const uint32_t rows = std::min(st.positions, span - base);
                    double all = double(rows) * (hd + dims) / 32 * c.attn_rows_stage_per_32, busiest = 0.0;
                    for (const uint32_t v : visible) {
                        if (v <= base) continue;
                        const double keys = std::min(rows, v - base);
                        const double warp = double(hd) * c.attn_rows_score_per_dim +
                                            kAttnRowsSlots * double(c.attn_rows_softmax_per_slot + lane_dims) +
                                            keys * per_key;
                        all += warp;
                        busiest = std::max(busiest, warp);
                    }
                    const double compute_ns = std::max(all / m.sm_issue_per_ns, busiest / warp_issue_per_ns);
                    const double rounds = load_rounds(rows, hd) + load_rounds(rows, dims);
                    if (c.attn_rows_prefetch && base > 0 && attn_rows_prefetched(rows, hd, s.dims.kv_bytes()))
                        ns += std::max(rounds * m.l1_load_ns, bytes_ns(rows, hd + dims) - last_compute_ns);
                    else if (st.joint)
                        ns += std::max(rounds * m.l2_load_ns, bytes_ns(rows, hd + dims));
                    else  // K, then V after the scores
                        ns += std::max(load_rounds(rows, hd) * m.l2_load_ns, bytes_ns(rows, hd)) +
                              std::max(load_rounds(rows, dims) * m.l2_load_ns, bytes_ns(rows, dims));
                    ns += compute_ns + (st.joint ? 2 : 4) * m.barrier_ns;
                    last_compute_ns = compute_ns;
                }
            }
        }
    }
    return ns;
}

// attn_rows on tensor cores (attn_rows_mma.cuh), the chunk starting at `start`: rounds of a tile of 16 (query, head)
// pairs a warp (both query blocks' pairs in one list: attn_mma_pairs), each round walking its visible positions in
// staged blocks of 16. A block costs its staging (two dependent load rounds from L2, or from L1 when prefetched; its
// bytes at the SM's L2 share where they take longer, a prefetched block's beyond the block before's compute), its
// busy warps' work (at the SM's issue rate, the busiest scheduler's, or the tensor cores': the SM's, or the busiest
// scheduler's quarter of them) and two barriers.
struct AttnRowsMmaWork {
    double ns = 0;
    uint64_t tensor_flops = 0;  // the MMAs issued
    uint64_t instructions = 0;  // warp instructions issued, the MMAs' and the staging's included
};
AttnRowsMmaWork attn_rows_mma_work(const Schedule& s, const Instruction& ins, uint32_t start, const AttnMmaStage& st,
                                   const DeviceModel& m) {
    const KernelStructure& c = m.code;
    const auto a = decode_args<AttnRowsArgs>(ins);
    const uint32_t hd = a.head_dim, steps = hd / 16, per_round = c.consumer_warps * kAttnMmaTile;
    const uint32_t mmas = 4 * steps * (1 + st.halves);  // S: 2 tiles x steps; P V: 2 steps tiles x 1 k-step
    const double warp_block = c.attn_mma_block_instructions + hd / 2.0 + 8.0 * steps * st.halves + mmas;
    const double stage = double(kAttnMmaBlockPositions) * hd / 2 / 32 * 2 *
                         (c.attn_mma_stage_item + (st.halves == 2 ? c.attn_mma_stage_split : 0));
    const uint64_t warp_flops = uint64_t(mmas) * 2 * 16 * 8 * 16;
    const double l2_bytes_per_ns = (m.l2_gbs > 0 ? m.l2_gbs : s.target.bandwidth_gbs) / s.target.n_sms;
    const double warp_issue_per_ns = m.sm_issue_per_ns / 4, tensor = m.sm_tensor_gflops;  // a scheduler's; flops a ns
    const double bytes_ns = 2.0 * kAttnMmaBlockPositions * hd * s.dims.kv_bytes() / l2_bytes_per_ns;
    const bool prefetch = c.attn_rows_prefetch && attn_rows_prefetched(kAttnMmaBlockPositions, hd, s.dims.kv_bytes());
    AttnRowsMmaWork w;
    const AttnMmaPairs list = attn_mma_pairs(a, a.n_tok);
    const uint32_t pairs = list.count();
    for (uint32_t round = 0; round < pairs; round += per_round) {
        const uint32_t last = std::min(pairs, round + per_round) - 1;
        const uint32_t span = start + list.last_query(round, last) + 1;
        std::vector<uint32_t> visible;  // each busy warp's latest query's
        for (uint32_t p0 = round; p0 <= last; p0 += kAttnMmaTile)
            visible.push_back(start + list.last_query(p0, std::min(p0 + kAttnMmaTile - 1, last)) + 1);
        double last_compute_ns = 0.0;
        for (uint32_t base = 0; base < span; base += kAttnMmaBlockPositions) {
            const auto busy =
                double(std::count_if(visible.begin(), visible.end(), [&](uint32_t v) { return v > base; }));
            // Warps 1..7 on 4 schedulers (and their quarters of the tensor cores): past 4 busy warps one carries two.
            const double per_scheduler = std::ceil(busy / 4);
            const double compute_ns = std::max({(stage + busy * warp_block) / m.sm_issue_per_ns,
                                                per_scheduler * warp_block / warp_issue_per_ns,
                                                tensor > 0 ? busy * warp_flops / tensor : 0.0,
                                                tensor > 0 ? 4.0 * per_scheduler * warp_flops / tensor : 0.0});
            if (prefetch && base > 0)
                w.ns += std::max(c.attn_mma_stage_load_rounds * m.l1_load_ns, bytes_ns - last_compute_ns);
            else
                w.ns += std::max(c.attn_mma_stage_load_rounds * m.l2_load_ns, bytes_ns);
            w.ns += compute_ns + 2 * m.barrier_ns;
            w.tensor_flops += uint64_t(busy) * warp_flops;
            w.instructions += uint64_t(stage + busy * warp_block);
            last_compute_ns = compute_ns;
        }
    }
    return w;
}

// Which path attn_rows.cuh takes for this model's heads and cache, as the device decides it (unused: not attn_rows).
AttnMmaStage attn_rows_mma_stage_of(const Schedule& s, const Instruction& ins, const KernelStructure& c) {
    if (!c.attn_rows_mma || ins.opcode != uint16_t(Opcode::attn_rows)) return {};
    return attn_rows_mma_stage(decode_args<AttnRowsArgs>(ins).head_dim, s.dims.kv_type == uint32_t(KvType::bf16),
                               c.scratch_floats);
}

// Where an attn_rows instruction's chunk starts, `position` being the step's last token's: T - 1 before it (at 0
// for a prompt's first chunk under the default 511 and T = 512).
uint32_t attn_rows_start(const Instruction& ins, uint32_t position) {
    const uint32_t T = decode_args<AttnRowsArgs>(ins).n_tok;
    return position + 1 > T ? position + 1 - T : 0;
}

}  // namespace

double device_poll_overshoot_ns(double waited_ns, const DeviceModel& m) {
    return waited_ns > 0 ? 0.5 * std::min(waited_ns, m.code.wait_backoff_max_ns) : 0.0;
}

DeviceTime device_instruction_time(const Schedule& s, const Instruction& ins, uint32_t position,
                                   const DeviceModel& m) {
    const KernelStructure& c = m.code;
    const OpInfo& op = op_info(ins.opcode);
    const std::string name = op.name;
    const double fill_bytes_per_ns = s.target.bandwidth_gbs / s.target.n_sms;  // the SM's share, all streaming
    DeviceTime t;

    // The consumers' serial path: the record, decode_args, the waits, the barriers, the signal.
    t.overhead_ns = c.record_loads * m.l2_load_ns + c.decode_byte_loads * m.byte_load_ns;
    t.overhead_ns += ins.n_waits * c.wait_dependent_loads * m.l2_load_ns;
    t.overhead_ns += c.barriers_per_instruction * m.barrier_ns;
    if (ins.n_signals) t.overhead_ns += c.signal_fences * m.fence_ns;

    const Cost cost = op.cost(ins, s.dims, s.weights.data());
    if (is_row_streaming(name)) {
        const PagePlan plan = plan_of(s, ins);
        const bool staged = name == "matvec_add" && !plan.tiles.empty() &&
                            s.weights[plan.tiles[0].weight].cols <= c.matvec_input_smem_cols;
        const bool smem_input = name != "matvec_add" || staged;
        if (name != "matvec_add")  // RMSNorm: a pass over x from L2 and a team sum (3 barriers)
            t.prologue_ns = m.l2_load_ns + 3 * m.barrier_ns;
        else if (staged)  // staging the input: one pass from L2 and a barrier
            t.prologue_ns = m.l2_load_ns + m.barrier_ns;
        t.consume_ns = t.prologue_ns + row_dots_ns(s, plan, smem_input, m);
        t.load_ns = double(cost.weight_bytes) / fill_bytes_per_ns;
        for (const Tile& tile : plan.tiles) t.tile_bytes.push_back(tile.bytes);
        t.pages = std::min<uint32_t>(plan.n_pages, uint32_t(plan.tiles.size()));
    } else if (name == "attn_partial") {
        const auto a = decode_args<AttnPartialArgs>(ins);
        int32_t begin = 0, end = 0;
        attn_chunk(int32_t(position), a.part, a.n_parts, begin, end);
        const uint32_t positions = uint32_t(std::max(0, end - begin));
        const uint32_t heads = c.attn_heads_serial ? a.group : 1;
        const uint32_t trips = (positions + c.attn_positions_per_trip - 1) / c.attn_positions_per_trip;
        const double kv_bytes = 2.0 * s.dims.kv_bytes() * positions * a.head_dim;  // K and V rows in the cache's type
        // A trip: its K/V rows' load rounds (from DRAM unless the loader prefetched them: the step's 2.47 GB of
        // weights evict them from L2), then the dependent shuffles and the softmax's exps.
        const double round_ns = c.attn_kv_prefetched ? m.l2_load_ns : m.dram_load_ns;
        const double trip_ns = c.attn_trip_load_rounds * round_ns + c.attn_trip_shuffles * m.shuffle_ns + m.exp_ns;
        t.consume_ns = std::max(heads * trips * trip_ns, kv_bytes * heads / fill_bytes_per_ns);
        t.consume_ns += heads * 2 * m.barrier_ns;  // the per-head merge's two barriers
    } else if (cost.token_columns) {
        // A prefill rows op: its tiles through the pages (the first token block's rows from DRAM, a later block's
        // from L2, which the first block's instruction filled in the same wave: gemm_tiling), the inputs from L2 as
        // often as rows_math.cuh reads them, and the dots on tensor cores (MMA tiles) or CUDA cores.
        const PagePlan plan = plan_of(s, ins);
        const RowsWork work = rows_work(s, name, plan, cost, m);
        // A model without an L2 rate prices L2 reads at the DRAM share; one without tensor cores, every flop on the
        // CUDA cores.
        const double l2_bytes_per_ns = m.l2_gbs > 0 ? m.l2_gbs / s.target.n_sms : fill_bytes_per_ns;
        const double math_ns = work.mma && m.sm_tensor_gflops > 0 ? double(work.tensor_flops) / m.sm_tensor_gflops
                                                                  : double(cost.flops) / s.target.sm_gflops;
        // The MMA tiles' instruction issue (their inputs' splits, the weights' unpacking), or their type
        // conversions' slower pipe: a third bound.
        const double issue_ns = mma_issue_ns(work.mma_instructions, work.mma_conversions, work.team_barriers, m);
        if (work.normed) t.prologue_ns = m.l2_load_ns + 3 * m.barrier_ns;
        // A later block's rows share the SM's L2 rate with its inputs.
        const uint64_t l2_bytes = work.l2_bytes + (cost.later_token_block ? work.weight_bytes : 0);
        t.consume_ns = t.prologue_ns + std::max({double(l2_bytes) / l2_bytes_per_ns, math_ns, issue_ns, work.chain_ns});
        t.fill_bytes_per_ns = cost.later_token_block ? l2_bytes_per_ns : 0.0;
        t.load_ns = double(work.weight_bytes) / (cost.later_token_block ? l2_bytes_per_ns : fill_bytes_per_ns);
        for (const Tile& tile : plan.tiles) t.tile_bytes.push_back(tile.bytes);
        t.pages = std::min<uint32_t>(plan.n_pages, uint32_t(plan.tiles.size()));
    } else if (name == "attn_rows") {
        const uint32_t start = attn_rows_start(ins, position);
        const AttnMmaStage st = attn_rows_mma_stage_of(s, ins, c);
        t.consume_ns = st.used ? attn_rows_mma_work(s, ins, start, st, m).ns : attn_rows_ns(s, ins, start, m);
    } else {
        // Small ops (embed, attn_reduce, sample, reduce_add, transfer): their bytes at the SM's share,
        // at least one dependent load, and the flops at the SM's rate.
        const double bytes_ns = double(cost.activation_bytes + cost.weight_bytes) / fill_bytes_per_ns;
        t.consume_ns = std::max(m.l2_load_ns + bytes_ns, double(cost.flops) / s.target.sm_gflops);
        t.consume_ns += double(cost.link_bytes) / s.target.link_gbs;
    }
    return t;
}

const char* PrefillBounds::bound() const {
    const double parts[6] = {dram_ms, l2_ms, tensor_ms, issue_ms, chain_ms, other_ms};
    const char* names[6] = {"DRAM bytes",        "L2 bytes",    "tensor-core flops", "instruction issue",
                            "k-step round trips", "other flops"};
    return names[std::max_element(parts, parts + 6) - parts];
}

PrefillBounds prefill_bounds(const Schedule& s, const DeviceModel& m, uint32_t position) {
    PrefillBounds b;
    for (const auto& stream : s.streams)
        for (const Instruction& ins : stream) {
            const OpInfo& op = op_info(ins.opcode);
            const Cost cost = op.cost(ins, s.dims, s.weights.data());
            const AttnMmaStage st = attn_rows_mma_stage_of(s, ins, m.code);
            if (st.used && m.sm_tensor_gflops > 0) {  // attention's K/V from DRAM, its dots on tensor cores
                b.dram_bytes += cost.weight_bytes + cost.activation_bytes;
                const AttnRowsMmaWork work = attn_rows_mma_work(s, ins, attn_rows_start(ins, position), st, m);
                b.tensor_flops += work.tensor_flops;
                b.mma_instructions += work.instructions;
                continue;
            }
            if (!cost.token_columns) {  // the other ops: their bytes from DRAM, flops on CUDA cores
                b.dram_bytes += cost.weight_bytes + cost.activation_bytes;
                b.other_flops += cost.flops;
                continue;
            }
            const RowsWork work = rows_work(s, op.name, plan_of(s, ins), cost, m);
            (cost.later_token_block ? b.l2_bytes : b.dram_bytes) += work.weight_bytes;
            b.l2_bytes += work.l2_bytes;
            const bool tensor = work.mma && m.sm_tensor_gflops > 0;
            (tensor ? b.tensor_flops : b.other_flops) += tensor ? work.tensor_flops : cost.flops;
            b.mma_instructions += work.mma_instructions;
            b.mma_conversions += work.mma_conversions;
            b.team_barriers += work.team_barriers;
            b.chain_ns += work.chain_ns;
        }
    const double n = double(s.streams.size());
    b.dram_ms = double(b.dram_bytes) / s.target.bandwidth_gbs / 1e6;
    b.l2_ms = double(b.l2_bytes) / (m.l2_gbs > 0 ? m.l2_gbs : s.target.bandwidth_gbs) / 1e6;
    b.tensor_ms = b.tensor_flops ? double(b.tensor_flops) / (n * m.sm_tensor_gflops) / 1e6 : 0.0;
    b.other_ms = double(b.other_flops) / (n * s.target.sm_gflops) / 1e6;
    b.issue_ms = mma_issue_ns(b.mma_instructions, b.mma_conversions, b.team_barriers, m) / n / 1e6;
    b.chain_ms = b.chain_ns / n / 1e6;
    return b;
}

double device_step_boundary_ns(const Target& t, const DeviceModel& m) {
    const KernelStructure& c = m.code;
    double ns = c.token_system_fences * m.system_fence_ns + c.token_pcie_reads * m.pcie_read_ns;
    ns += t.hop_ns;  // every SM's gate sees steps_done
    return ns;
}

std::vector<TileShape> device_tile_shapes(const Schedule& s, const DeviceModel& m) {
    std::map<std::string, TileShape> by_shape;
    for (const auto& stream : s.streams)
        for (const Instruction& ins : stream) {
            if (!is_row_streaming(op_info(ins.opcode).name)) continue;
            const PagePlan plan = plan_of(s, ins);
            uint32_t instruction_rows = 0;
            for (const Tile& tile : plan.tiles) instruction_rows += tile.n_rows;
            for (const Tile& tile : plan.tiles) {
                const WeightFormat& w = s.weights[tile.weight];
                const std::string key = fmt::format("{} x {} {}", w.rows, w.cols, dtype_name(DType(w.dtype)));
                TileShape& shape = by_shape[key];
                shape.weight = key;
                shape.warps = m.code.consumer_warps;
                // The shape's usual tile (the largest) in its smallest instruction.
                if (tile.n_rows >= shape.rows_per_tile) {
                    shape.rows_per_tile = tile.n_rows;
                    const uint32_t busy = device_warps_busy(tile.n_rows, instruction_rows, m.code);
                    shape.warps_busy = shape.tiles == 0 ? busy : std::min(shape.warps_busy, busy);
                }
                shape.tiles++;
            }
        }
    std::vector<TileShape> out;
    for (auto& [key, shape] : by_shape) out.push_back(shape);
    return out;
}

}  // namespace mk

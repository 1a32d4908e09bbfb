// The resident interpreter's per-instruction cost: a serial consumer path (decode, waits, barriers,
// signal fences) plus the op's work per tile, overlapped with the loader's page fills.
#include "scheduler/device_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/core.h>

#include "instructions/attn_partial/attn_partial.hpp"
#include "instructions/registry.hpp"
#include "models/quant.hpp"

namespace mk {

DeviceModel device_model_h200() {
    DeviceModel m;
    m.name = "h200";
    // Latencies: assumed until measured (orders of magnitude from public H100 microbenchmarks: L2 hits
    // ~260-470 cycles by partition, DRAM ~1000+ cycles, at ~1.75-1.98 GHz).
    m.l2_load_ns = 250;
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
    // H100/H200 SXM datasheet: 989.4 TFLOPS dense BF16 / 132 SMs (the clock it assumes; mma.sync may reach less
    // than the wgmma peak: assumed until measured).
    m.sm_tensor_gflops = 989400.0 / 132.0;
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
    PlanInputs in{s.weights.data(), s.target.page_bytes, s.target.n_pages};
    return op_info(ins.opcode).page_plan(ins, in);
}

}  // namespace

double device_flops_ns(const Cost& cost, const Target& t, const DeviceModel& m) {
    const double tensor_ns = m.sm_tensor_gflops > 0 ? double(cost.mma_flops) / m.sm_tensor_gflops : 0.0;
    const uint64_t scalar = m.sm_tensor_gflops > 0 ? cost.flops - cost.mma_flops : cost.flops;
    return double(scalar) / t.sm_gflops + tensor_ns;
}

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
    } else {
        // Small ops (embed, attn_reduce, sample, reduce_add, transfer) and the prefill ops: their bytes at the
        // SM's share, at least one dependent load, and the flops at the SM's rate (tensor cores' for mma_flops).
        const double bytes_ns = double(cost.activation_bytes + cost.weight_bytes) / fill_bytes_per_ns;
        t.consume_ns = std::max({m.l2_load_ns + bytes_ns, device_flops_ns(cost, s.target, m)});
        t.consume_ns += double(cost.link_bytes) / s.target.link_gbs;
    }
    return t;
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

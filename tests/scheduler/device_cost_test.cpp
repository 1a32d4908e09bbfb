// The device cost model against hand-computed times: tiles by busy warps (whole rows, split columns),
// the serial per-instruction path, the poll overshoot, the step boundary, and the simulator using them.
#include <catch2/catch.hpp>

#include "instructions/attn_rows/attn_rows.hpp"
#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"
#include "instructions/matmul_add/matmul_add.hpp"
#include "scheduler/device_cost.hpp"
#include "scheduler/simulate.hpp"
#include "tests/scheduler/tiny_schedule.hpp"

using namespace mk;
using namespace mk::test;

namespace {

// Round numbers so each expected time is a short sum.
DeviceModel round_model() {
    DeviceModel m;
    m.name = "round";
    m.l2_load_ns = 100;
    m.dram_load_ns = 500;
    m.byte_load_ns = 1;
    m.barrier_ns = 10;
    m.fence_ns = 200;
    m.system_fence_ns = 1000;
    m.pcie_read_ns = 2000;
    m.warp_reduce_ns = 5;
    m.warp_cols_l2_per_ns = 1;
    m.warp_cols_smem_per_ns = 2;
    m.sm_cols_per_ns = 1000;
    m.shuffle_ns = 2;
    m.exp_ns = 10;
    // The structure before issue 20's device changes (the hand computations below assume it).
    m.code.rows_across_tiles = false;
    m.code.matvec_input_smem_cols = 0;
    m.code.record_loads = 1;
    m.code.wait_dependent_loads = 3;
    m.code.decode_byte_loads = 20;
    m.code.signal_fences = 2;
    m.code.attn_heads_serial = true;
    m.code.attn_positions_per_trip = 7;
    m.code.attn_trip_load_rounds = 1;
    m.code.attn_trip_shuffles = 5;
    m.code.attn_kv_prefetched = false;
    m.code.token_system_fences = 3;
    m.code.wait_backoff_max_ns = 1024;
    m.code.attn_rows_mma = false;  // prefill attention on CUDA cores (its tensor-core path has a test of its own)
    return m;
}

}  // namespace

TEST_CASE("device cost: consumer warps busy per tile", "[cpu]") {
    KernelStructure code = round_model().code;
    CHECK(device_warps_busy(1, 16, code) == 1);
    CHECK(device_warps_busy(4, 16, code) == 4);
    CHECK(device_warps_busy(45, 90, code) == 7);
    code.rows_across_tiles = true;
    CHECK(device_warps_busy(1, 16, code) == 7);
    CHECK(device_warps_busy(4, 16, code) == 7);
    CHECK(device_warps_busy(4, 4, code) == 4);
}

TEST_CASE("device cost: a matvec_add's serial path and tiles", "[cpu]") {
    // Two SMs at 2 GB/s: 1 byte/ns each. The toy weight: 16 fp32 columns, 64 bytes a row, one row a page.
    Schedule s = tiny_schedule(2, 1);
    s.target.bandwidth_gbs = 2.0;
    Instruction mv = matvec(0, 16, 16, 4);  // rows 16..19: four one-row tiles
    signal(mv, 0);
    wait(mv, 0, 1);
    DeviceModel m = round_model();

    // Overhead: record 100 + decode 20 + one wait of 3 dependent loads 300 + 2 barriers 20 + 2 fences 400.
    // Consume: per tile one warp, 16 columns from L2 at 1/ns + reduce 5, + the release barrier 10 = 31.
    // Load: 4 x 64 bytes at 1 byte/ns.
    DeviceTime t = device_instruction_time(s, mv, 0, m);
    CHECK(t.overhead_ns == Approx(840.0));
    CHECK(t.consume_ns == Approx(4 * 31.0));
    CHECK(t.load_ns == Approx(256.0));
    CHECK(t.total_ns() == Approx(964.0));

    // Input staged in shared memory: one pass from L2 and a barrier (110), then 16 / 2 + 5 + 10 = 23 a tile.
    m.code.matvec_input_smem_cols = 16;
    t = device_instruction_time(s, mv, 0, m);
    CHECK(t.consume_ns == Approx(110.0 + 4 * 23.0));

    // Rows across tiles: 4 rows on 7 warps, one row dot each (16 / 2 + 5), no barrier per tile.
    m.code.rows_across_tiles = true;
    t = device_instruction_time(s, mv, 0, m);
    CHECK(t.consume_ns == Approx(110.0 + 13.0));

    // The instruction queue: no record load, the wait's target staged (1 load: the counter), so
    // 20 + 100 + 20 + 400.
    m.code.record_loads = 0;
    m.code.wait_dependent_loads = 1;
    CHECK(device_instruction_time(s, mv, 0, m).overhead_ns == Approx(540.0));
}

TEST_CASE("device cost: poll overshoot and step boundary", "[cpu]") {
    DeviceModel m = round_model();
    CHECK(device_poll_overshoot_ns(0, m) == 0.0);
    CHECK(device_poll_overshoot_ns(200, m) == Approx(100.0));
    CHECK(device_poll_overshoot_ns(1e6, m) == Approx(512.0));

    Target t;
    t.n_sms = 2;
    t.bandwidth_gbs = 2.0;
    t.page_bytes = 64;
    t.hop_ns = 700;
    // 3 system fences + 1 PCIe read + the gate's hop (the first pages' fill is in the simulated step).
    CHECK(device_step_boundary_ns(t, m) == Approx(3000.0 + 2000.0 + 700.0));
}

TEST_CASE("device cost: the simulator charges it when asked", "[cpu]") {
    Schedule s = tiny_schedule(2, 1);
    s.target.bandwidth_gbs = 2.0;
    s.target.hop_ns = 1000;
    Instruction a = matvec(16, 4, 0, 4), b = matvec(0, 4, 8, 4);
    signal(a, 0);
    wait(b, 0, 1);
    s.streams = {{a}, {b}};
    finish(s);
    const DeviceModel m = round_model();
    SimOptions o;
    o.device = &m;
    const Simulation sim = simulate(s, o);
    // Each SM's loader streams its four 64-byte tiles from the gate at 1 byte/ns; tile k lands at
    // 64 (k + 1) + 500 (a DRAM latency): 564, 628, 692, 756. Tiles a row each, 31 ns to consume (16 + 5 + 10).
    // a: overhead 540 (record 100, decode 20, barriers 20, 2 fences 400), then each tile as it lands:
    // 564 + 31 = 595, 628 + 31 = 659, 723, 787.
    // b: waits for a's signal, seen 1000 later, its poll half the 1024 ns back-off cap late: starts at 2299;
    // overhead 440 (a wait of 3 loads, no signal); its tiles landed while it waited: 2299 + 440 + 4 x 31.
    CHECK(sim.timeline[0][0].end_ns == Approx(787.0));
    CHECK(sim.timeline[1][0].start_ns == Approx(787.0 + 1000.0 + 512.0));
    CHECK(sim.makespan_ns == Approx(2299.0 + 440.0 + 124.0));
    CHECK(sim.step_boundary_ns == Approx(device_step_boundary_ns(s.target, m)));
    CHECK(sim.token_ns() == Approx(sim.makespan_ns + sim.step_boundary_ns));
    const OpTotal& mv = sim.ops[size_t(Opcode::matvec_add)];
    CHECK(mv.overhead_ns + mv.consume_ns > 0.0);
    CHECK(mv.busy_ns == Approx(787.0 + 564.0));

    // Streaming across steps, the pages were filled before the gate: a is 540 + 124 = 664, b starts at
    // 664 + 1000 + 512 and takes 440 + 124.
    DeviceModel across = m;
    across.code.stream_across_steps = true;
    o.device = &across;
    CHECK(simulate(s, o).makespan_ns == Approx(2176.0 + 564.0));

    // Pages bound the run-ahead: with 2 pages, a's tiles 2 and 3 wait for tiles 0 and 1 to be consumed
    // (595, 659), landing at 595 + 64 + 500 = 1159 and 1223 (the loader's bandwidth was free): a ends at 1254.
    s.target.n_pages = 2;
    o.device = &m;
    CHECK(simulate(s, o).timeline[0][0].end_ns == Approx(1254.0));
}

TEST_CASE("device cost: attention trips by the kernel's structure", "[cpu]") {
    Schedule s = tiny_schedule(2, 1);
    s.target.bandwidth_gbs = 2.0;  // 1 byte/ns per SM
    // KV head 0 of the toy model, one chunk, head_dim 2, group 1; position 13: 14 positions.
    const Instruction ins = make_instruction<AttnPartialOp>(AttnPartialArgs{0, 0, 0, 1, 0, 0, 0, 2, 1});
    DeviceModel m = round_model();
    // Before: 7 positions a trip, 2 trips of one DRAM round (500) + 5 shuffles (10) + exps (10); K and V bytes
    // (2 x 4 x 14 x 2 = 224 at 1 byte/ns) are less; + the merge's 2 barriers.
    CHECK(device_instruction_time(s, ins, 13, m).consume_ns == Approx(2 * 520.0 + 20.0));
    // One lane a position: one trip of 8 load rounds and 42 shuffles.
    m.code.attn_heads_serial = false;
    m.code.attn_positions_per_trip = 224;
    m.code.attn_trip_load_rounds = 8;
    m.code.attn_trip_shuffles = 42;
    CHECK(device_instruction_time(s, ins, 13, m).consume_ns == Approx(8 * 500.0 + 84.0 + 10.0 + 20.0));
    // The loader prefetched the rows: the 8 rounds hit L2 (100 each).
    m.code.attn_kv_prefetched = true;
    CHECK(device_instruction_time(s, ins, 13, m).consume_ns == Approx(8 * 100.0 + 84.0 + 10.0 + 20.0));
}

// attn_rows as attn_rows.cuh runs it: 2 warps, head_dim 32 (2 accumulators a lane: one pass), two queries of a
// 2-token chunk whose last token is at position 40 (the chunk starts at 39: the queries see 40 and 41 positions),
// one query head per KV head. Issue 4 instructions/ns for the SM (1 for a warp); L2 1,000 bytes/ns per SM, so a
// block's staging is its dependent load rounds (100 each from L2): a lane loads 4 of its warp's rows (of 32 columns)
// before storing them, so 32 rows on 2 warps are 4 rounds for K and 4 for V, 9 rows 2 and 2.
TEST_CASE("device cost: prefill attention's staged blocks", "[cpu]") {
    Schedule s = tiny_schedule(2, 1);
    DeviceModel m = round_model();
    m.sm_issue_per_ns = 4.0;
    m.l2_gbs = 2000.0;
    m.l1_load_ns = 5.0;
    m.code.consumer_warps = 2;
    m.code.scratch_floats = 10000;  // K (pitch 33) and V (32) of 32 positions at once: two barriers a block
    m.code.attn_rows_prefetch = false;
    const Instruction one_block = make_instruction<AttnRowsOp>(AttnRowsArgs{0, 0, 0, 2, 0, 0, 32, 1, 2, 0, 0});
    // One round (2 pairs, one warp's 4 slots), positions [0, 32) and [32, 41). A busy warp's block: scores 32 x 6,
    // 4 slots' softmax 4 x (30 + 2), per key 6 + 5 x 2 = 16; with the staging's 4 per 32 elements of K and V, under
    // 4 x one warp's: one busy warp's issue bounds a block.
    const double warp0 = 32 * 6 + 4 * 32 + 32 * 16, warp1 = 32 * 6 + 4 * 32 + 9 * 16;  // 832, 464
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(warp0 + 820.0 + warp1 + 420.0));
    // Less room: K then V in turn (the same rounds, four barriers a block).
    m.code.scratch_floats = 1100;
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(warp0 + 840.0 + warp1 + 440.0));
    // The queries as an early and a late block: two rounds, the first over 40 positions ([32, 40): 8 keys, 1 + 1
    // load rounds).
    m.code.scratch_floats = 10000;
    const Instruction two_blocks = make_instruction<AttnRowsOp>(AttnRowsArgs{0, 0, 0, 1, 0, 0, 32, 1, 2, 1, 1});
    const double warp1_early = 32 * 6 + 4 * 32 + 8 * 16;
    CHECK(device_instruction_time(s, two_blocks, 40, m).consume_ns ==
          Approx(warp0 + 820.0 + warp1_early + 220.0 + warp0 + 820.0 + warp1 + 420.0));
    // A 2-token chunk ending at position 1 starts at 0: one block of 2 positions (the second query's), 1 + 1 rounds.
    CHECK(device_instruction_time(s, one_block, 1, m).consume_ns == Approx(32 * 6 + 4 * 32 + 2 * 16 + 220.0));
    // The second block prefetched into L1 during the first: its 4 load rounds at 5 ns, its 9 x 64 x 4 bytes (2.3 ns)
    // streamed while the first computed.
    m.code.attn_rows_prefetch = true;
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(warp0 + 820.0 + warp1 + 40.0));
    // At 1 byte/ns the bytes bound both: 8,192 ns for the first block; the second's 2,304 take 1,472 beyond the
    // first's 832 of compute.
    m.l2_gbs = 2.0;
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns ==
          Approx(warp0 + 32 * 64 * 4 + 20.0 + (9 * 64 * 4 - warp0) + warp1 + 20.0));
}

TEST_CASE("device cost: prefill attention on tensor cores", "[cpu]") {
    // Which heads take the path: multiples of 16 up to 64 whose K and V blocks (16 positions, hi and lo halves for
    // an fp32 cache) fit the scratch: head_dim 64 in fp32 takes 2 x 16 x 36 + 2 x 64 x 12 = 2,688 of the H200's 4,076.
    CHECK(attn_rows_mma_stage(64, false, 4076).used);
    CHECK(attn_rows_mma_stage(64, false, 2688).used);
    CHECK_FALSE(attn_rows_mma_stage(64, false, 2687).used);
    CHECK(attn_rows_mma_stage(64, true, 1344).used);
    CHECK(attn_rows_mma_stage(48, false, 4076).used);
    CHECK_FALSE(attn_rows_mma_stage(128, false, 100000).used);
    CHECK_FALSE(attn_rows_mma_stage(18, false, 4076).used);

    Schedule s = tiny_schedule(2, 1);
    DeviceModel m = round_model();
    m.code.attn_rows_mma = true;
    m.sm_issue_per_ns = 4.0;
    m.sm_tensor_gflops = 1000.0;  // flops a ns
    m.l2_gbs = 2000.0;            // 1,000 bytes a ns an SM
    m.l1_load_ns = 5.0;
    m.code.consumer_warps = 2;
    m.code.scratch_floats = 10000;
    m.code.attn_rows_prefetch = false;
    // Two queries of one head (head_dim 32, an fp32 cache) at position 40: one tile, one round over positions
    // [0, 41): 3 blocks of 16. A block: 4 x 2 x 3 = 24 MMAs on the busy warp (98,304 flops: 98.3 ns at the SM's
    // tensor rate, 393.2 at a quarter of it), its 220 + 16 + 32 + 24 = 292 other instructions (292 ns at one
    // scheduler's 1 a ns) and the staging's 16 x 19 = 304 (149 ns for both at the SM's 4); 2 load rounds from L2
    // (200 ns; the 4,096 bytes take 4.1) and 2 barriers.
    const Instruction one_block = make_instruction<AttnRowsOp>(AttnRowsArgs{0, 0, 0, 2, 0, 0, 32, 1, 2, 0, 0});
    const double f32_block = 4 * 24 * 4096 / 1000.0 + 200 + 20;
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(3 * f32_block));
    // The queries as an early and a late block: one list, one round over the later query's span: the same walk.
    const Instruction two_blocks = make_instruction<AttnRowsOp>(AttnRowsArgs{0, 0, 0, 1, 0, 0, 32, 1, 2, 1, 1});
    CHECK(device_instruction_time(s, two_blocks, 40, m).consume_ns == Approx(3 * f32_block));
    // Blocks after the first prefetched into L1: their 2 load rounds at 5 ns (their bytes stream during the block
    // before).
    m.code.attn_rows_prefetch = true;
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(3 * f32_block - 2 * 190));
    m.code.attn_rows_prefetch = false;
    // A bf16 cache: no lo halves, 16 MMAs (262.1 ns at a quarter of the rate), 268 other instructions: one warp's
    // issue bounds a block.
    s.dims.kv_type = uint32_t(KvType::bf16);
    CHECK(device_instruction_time(s, one_block, 40, m).consume_ns == Approx(3 * (268 + 200 + 20)));
    // Without room for a block's halves the device takes the CUDA-core path, and so does the model.
    s.dims.kv_type = uint32_t(KvType::f32);
    m.code.scratch_floats = 1100;
    const double mma_off_room = device_instruction_time(s, one_block, 40, m).consume_ns;
    m.code.attn_rows_mma = false;
    CHECK(mma_off_room == Approx(device_instruction_time(s, one_block, 40, m).consume_ns));
}

TEST_CASE("device cost: which prefill matmuls run on tensor cores", "[cpu]") {
    // BF16, F16, Q8_0, Q4_0 and Q4_1 weights of whole 32-column blocks times 8 to 112 tokens (one n8 fragment to 2
    // chunks a warp on 7 warps) run on tensor cores, F16 with a third product; everything else on CUDA cores.
    const uint32_t bf16 = uint32_t(DType::BF16), f16 = uint32_t(DType::F16);
    CHECK(mma_eligible(bf16, 64, 8));
    CHECK(mma_eligible(bf16, 64, 112));
    CHECK(mma_eligible(f16, 2048, 64));
    CHECK_FALSE(mma_eligible(bf16, 64, 7));
    CHECK_FALSE(mma_eligible(bf16, 64, 113));
    CHECK_FALSE(mma_eligible(bf16, 48, 64));
    CHECK_FALSE(mma_eligible(uint32_t(DType::F32), 64, 64));
    CHECK_FALSE(mma_eligible(uint32_t(DType::Q4_K), 256, 64));
    CHECK_FALSE(mma_eligible(uint32_t(DType::Q6_K), 256, 64));
    CHECK(mma_products(bf16) == 2);
    CHECK(mma_products(f16) == 3);
    // The block formats: quants as bf16 (exact), in spans of 16-byte pieces (Q8_0 and Q4_0 8 blocks, Q4_1 4) or, where
    // the rows are not whole spans, whole-row slices copied at once, 16 rows to a page.
    const uint32_t q8_0 = uint32_t(DType::Q8_0), q4_0 = uint32_t(DType::Q4_0), q4_1 = uint32_t(DType::Q4_1);
    CHECK(mma_eligible(q8_0, 256, 64));
    CHECK(mma_eligible(q8_0, 64, 64));
    CHECK(mma_eligible(q4_0, 2048, 8));
    CHECK(mma_eligible(q4_1, 576, 112));
    CHECK(mma_products(q4_1) == 2);
    CHECK(mma_span_cols(q8_0) == 256);
    CHECK(mma_span_cols(q4_0) == 256);
    CHECK(mma_span_cols(q4_1) == 128);
    const auto format = [](uint32_t dtype, uint32_t cols, uint64_t row_bytes) {
        WeightFormat w;
        w.dtype = dtype, w.rows = 64, w.cols = cols, w.row_bytes = row_bytes;
        return w;
    };
    CHECK(mma_slice_cols(16384, format(q4_0, 2048, 1152)) == 1792);  // 7 spans of 144 bytes: 16128 a tile
    CHECK(mma_slice_cols(16384, format(q4_1, 2048, 1280)) == 1408);  // 11 spans of 80 bytes (12 fit: odd, for banks)
    CHECK(mma_slice_cols(16384, format(q8_0, 2048, 2176)) == 768);
    // SmolLM2's Q4_1 rows (576 columns, 360 bytes; 368 padded, as the CUDA backend uploads them): whole rows.
    CHECK(mma_slice_cols(16384, format(q4_1, 576, 360)) == 576);
    CHECK(mma_slice_cols(16384, format(q4_1, 576, 368)) == 576);
    CHECK(mma_row_align(format(q4_1, 576, 360)) == 2);   // 720 bytes: a 16-byte multiple
    CHECK(mma_row_align(format(q4_1, 576, 368)) == 1);
    CHECK(mma_row_align(format(q8_0, 64, 68)) == 4);
    CHECK(mma_row_align(format(q4_1, 2048, 1280)) == 1);  // spans
    CHECK(mma_slice_cols(1024, format(q4_1, 576, 368)) == 0);  // 16 rows do not fit the page
}

// The KV cache's type prices attention's K/V bytes: the op's cost (the ideal model, the list scheduler) and the
// device model's byte floor halve with a bf16 cache, and rms_qkv's K/V stores with it.
TEST_CASE("device cost: a bf16 KV cache halves attention's K/V bytes", "[cpu]") {
    Schedule s = tiny_schedule(2, 1);
    s.target.bandwidth_gbs = 2.0;  // 1 byte/ns per SM
    const Instruction attn = make_instruction<AttnPartialOp>(AttnPartialArgs{0, 0, 0, 1, 0, 0, 0, 2, 1});
    const Instruction k_rows = make_instruction<RmsQkvOp>(RmsQkvArgs{0, 1, 0, 2, 0, 0, 0, 0, kNoWeight, kNoWeight, 4, 2});
    DeviceModel m = round_model();
    m.code.attn_heads_serial = false;
    m.code.attn_positions_per_trip = 224;
    m.code.attn_trip_load_rounds = 1;
    m.code.attn_trip_shuffles = 0;
    // Position 1023: 5 trips of 510 ns, under the K/V bytes 2 x 4 x 1024 x 2 = 16384 (f32) or 8192 (bf16) at
    // 1 byte/ns; + the merge's 2 barriers.
    const OpInfo& attn_op = op_info(attn.opcode);
    const OpInfo& qkv_op = op_info(k_rows.opcode);
    const Cost attn_f32 = attn_op.cost(attn, s.dims, s.weights.data());
    const Cost qkv_f32 = qkv_op.cost(k_rows, s.dims, s.weights.data());
    CHECK(device_instruction_time(s, attn, 1023, m).consume_ns == Approx(16384.0 + 20.0));
    s.dims.kv_type = uint32_t(KvType::bf16);
    CHECK(device_instruction_time(s, attn, 1023, m).consume_ns == Approx(8192.0 + 20.0));
    const Cost attn_bf16 = attn_op.cost(attn, s.dims, s.weights.data());
    CHECK(attn_bf16.activation_bytes * 2 == attn_f32.activation_bytes);
    CHECK(attn_bf16.flops == attn_f32.flops);
    // rms_qkv: the d_model fp32 input (16 bytes) and two K elements, 4 bytes each or 2.
    CHECK(qkv_f32.activation_bytes == 16 + 8);
    CHECK(qkv_op.cost(k_rows, s.dims, s.weights.data()).activation_bytes == 16 + 4);
}

// A prefill matmul (64 rows x 1024 columns, 32 tokens) as rows_math.cuh runs it. MMA tiles (BF16): 4 groups of 16 rows
// in one pass (8 tiles a slice allowed: 4 chunks of 8 tokens, 1 a warp), slices of 480, 480 and 64 columns; the inputs
// read once; MMAs as issued, hi and lo: 2 x 16 x 1024 x 32 x 2 a group (F16: x 3). Whole rows (F32): the inputs read
// once a row, the dots on CUDA cores.
TEST_CASE("device cost: a prefill matmul on MMA tiles and on whole rows", "[cpu]") {
    Schedule s = tiny_schedule(2, 0);
    s.target.page_bytes = 16384;
    s.target.n_pages = 8;
    s.target.bandwidth_gbs = 100.0;  // 50 bytes/ns per SM
    s.target.sm_gflops = 10.0;
    const uint32_t wo = layer_weight_id(0, LayerWeight::wo);
    s.weights[wo] = {uint32_t(DType::BF16), 64, 1024, 2048};
    DeviceModel m = round_model();
    m.l2_gbs = 200.0;             // 100 bytes/ns per SM
    m.sm_tensor_gflops = 1000.0;  // 1000 flops/ns
    const Instruction first = make_instruction<MatmulAddOp>(MatmulAddArgs{wo, 0, 64, 1024, 0, 0, 64, 32, 0, 0, 0});
    DeviceTime t = device_instruction_time(s, first, 0, m);
    CHECK(t.tile_bytes.size() == 12);
    CHECK(t.pages == 8);
    CHECK(t.fill_bytes_per_ns == 0.0);           // the first token block's rows come from DRAM
    CHECK(t.load_ns == Approx(131072.0 / 50.0));  // 64 rows of 2048 bytes
    // L2: the inputs and x read and written, 4 x 32 x (1024 + 2 x 64) = 147456 bytes (1474.6 ns) < the MMAs.
    CHECK(t.consume_ns == Approx(4.0 * 2 * 16 * 1024 * 32 * 2 / 1000.0));

    // The same as the k-step chain (mma_k_step_ns): 4 chunks on 4 warps, one a scheduler, each k-step's MMAs on its
    // quarter of the tensor cores: 4 tiles x 2 k16 halves x 2 products x 4096 flops at 250 flops/ns (262 ns) after
    // its inputs (from L1, 0 ns here; their prefetch, 100 ns from L2, came back during the k-step before); 32 k-steps.
    const double chunk_ns = 4.0 * 2 * 2 * 4096 / 250.0;
    CHECK(t.consume_ns == Approx(32 * chunk_ns));

    // A later token block (16 tokens): its rows from L2, sharing the SM's L2 rate with its inputs. Its 2 chunks keep
    // 2 warps busy, on 2 schedulers' halves of the tensor cores: the chain (32 x 262 ns) bounds it, not the SM's
    // MMA rate (4194 ns) nor the bytes ((73728 + 131072) / 100).
    const Instruction later = make_instruction<MatmulAddOp>(MatmulAddArgs{wo, 0, 64, 1024, 0, 0, 64, 32, 0, 16, 16});
    t = device_instruction_time(s, later, 0, m);
    CHECK(t.fill_bytes_per_ns == Approx(100.0));
    CHECK(t.load_ns == Approx(131072.0 / 100.0));
    CHECK(t.consume_ns == Approx(32 * chunk_ns));
    // Without the prefetch each k-step's loads wait 100 ns from L2 before its MMAs.
    m.code.mma_prefetch_k_steps = 0;
    CHECK(device_instruction_time(s, later, 0, m).consume_ns == Approx(32 * (100.0 + chunk_ns)));
    // Faster tensor cores (26.2 ns a chunk's k-step): a k-step waits for its prefetch, 100 ns from L2 issued one
    // k-step ahead (3200 ns); issued two ahead (50 ns a k-step, 1600), the L2 bytes bound it.
    m.sm_tensor_gflops = 10000.0;
    m.code.mma_prefetch_k_steps = 1;
    CHECK(device_instruction_time(s, later, 0, m).consume_ns == Approx(32 * 100.0));
    m.code.mma_prefetch_k_steps = 2;
    CHECK(device_instruction_time(s, later, 0, m).consume_ns == Approx((4.0 * 16 * (1024 + 128) + 131072) / 100.0));
    m.sm_tensor_gflops = 1000.0;

    s.streams[0].push_back(first);
    const PrefillBounds b = prefill_bounds(s, m);
    CHECK(b.dram_bytes == 131072);
    CHECK(b.l2_bytes == 147456);
    CHECK(b.tensor_flops == 4ull * 2 * 16 * 1024 * 32 * 2);
    // The stream's one instruction, over 2 SMs: its chain is its MMAs at the SM's rate (4 busy warps, one a
    // scheduler), a tie with the tensor-core bound.
    CHECK(b.chain_ms == Approx(32 * chunk_ns / 2 / 1e6));
    CHECK(b.chain_ms == Approx(b.tensor_ms));
    s.streams[0].push_back(later);  // its chain is twice its share of the SM's MMA rate
    CHECK(std::string(prefill_bounds(s, m).bound()) == "k-step round trips");
    s.streams[0].pop_back();

    // F16 weights: the same MMA tiles, each k-step a third product (the weights' low bf16 half).
    s.weights[wo].dtype = uint32_t(DType::F16);
    t = device_instruction_time(s, first, 0, m);
    CHECK(t.tile_bytes.size() == 12);
    CHECK(t.consume_ns == Approx(4.0 * 2 * 16 * 1024 * 32 * 3 / 1000.0));
    // The warps' instruction issue as a third bound (1 a ns): per 32-column k-step, 8-token chunk and tile the
    // format's count, per k-step and chunk the inputs' 62 (their prefetch included); 4 chunks, 32 k-steps, 4 groups
    // of 16 rows.
    m.sm_issue_per_ns = 1.0;
    CHECK(device_instruction_time(s, first, 0, m).consume_ns == Approx(4.0 * 32 * (4 * 106 + 62)));
    s.weights[wo].dtype = uint32_t(DType::BF16);
    CHECK(device_instruction_time(s, first, 0, m).consume_ns == Approx(4.0 * 32 * (4 * 8 + 62)));
    const PrefillBounds issue = prefill_bounds(s, m);  // the stream's one instruction, over 2 SMs
    CHECK(issue.mma_instructions == 4ull * 32 * (4 * 8 + 62));
    CHECK(issue.issue_ms == Approx(4.0 * 32 * (4 * 8 + 62) / 2 / 1e6));
    CHECK(std::string(issue.bound()) == "instruction issue");
    CHECK(issue.team_barriers == 0);
    // Q8_0: the team stages each tile's 32-column blocks once (90 instructions a block and tile, for every chunk),
    // the warps read them (20 a tile, chunk and k-step), two team barriers a k-step of each pass; 4 groups of 1,024
    // columns: 128 tile k-steps.
    s.weights[wo] = {uint32_t(DType::Q8_0), 64, 1024, 1088};
    const PrefillBounds staged = prefill_bounds(s, m);
    const uint64_t passes = staged.team_barriers / (2 * 32);
    CHECK(passes >= 1);
    CHECK(staged.team_barriers == passes * 2 * 32);
    CHECK(staged.mma_instructions == passes * 4 * 32 * 62 + 4ull * 128 * 20 + 128ull * 90);
    m.barrier_ns = 100;
    CHECK(prefill_bounds(s, m).issue_ms ==
          Approx((double(staged.mma_instructions) + double(staged.team_barriers) * 100) / 2 / 1e6));
    m.barrier_ns = 10;
    s.weights[wo] = {uint32_t(DType::BF16), 64, 1024, 2048};
    // Type conversions (per chunk and k-step the inputs' 4 pair splits, 2 each; none a tile: the weights are
    // unpacked by bits) at their own slower rate: the slower of the two bounds it.
    CHECK(issue.mma_conversions == 4ull * 32 * 8);
    m.sm_convert_per_ns = 0.05;
    CHECK(device_instruction_time(s, first, 0, m).consume_ns == Approx(4.0 * 32 * 8 / 0.05));
    CHECK(prefill_bounds(s, m).issue_ms == Approx(4.0 * 32 * 8 / 0.05 / 2 / 1e6));
    m.code.mma_step_conversions = 24;  // Q8_0's unpacking before: 16 I2F and 8 cvt a tile
    CHECK(device_instruction_time(s, first, 0, m).consume_ns == Approx(4.0 * 32 * (8 + 4 * 24) / 0.05));
    m.code.mma_step_conversions = 0;
    m.sm_convert_per_ns = 0.0;
    m.sm_issue_per_ns = 0.0;

    // F32 weights: whole rows (4 a page), each row's dots read all 32 tokens' inputs again: 63 more reads of
    // 4 x 32 x 1024 bytes; 2 x 32 x 64 x 1024 flops at 10 flops/ns bound it.
    s.weights[wo] = {uint32_t(DType::F32), 64, 1024, 4096};
    t = device_instruction_time(s, first, 0, m);
    CHECK(t.tile_bytes.size() == 16);
    CHECK(t.consume_ns == Approx(2.0 * 32 * 64 * 1024 / 10.0));
    s.target.sm_gflops = 1e6;  // free flops: the L2 bytes
    CHECK(device_instruction_time(s, first, 0, m).consume_ns == Approx((147456.0 + 63.0 * 4 * 32 * 1024) / 100.0));
}

// The CUDA emulator as a backend of the registry-driven op test (tests/instructions/op_test.cpp): each case's
// instruction runs as the device runs it — the op's device code (its .cuh) in a kernel-per-op launch of one
// block, tiles read in place from a blob of 16-byte-padded rows — on the emulated device.
#include <cuda_runtime_api.h>

#include <cstring>

#include "instructions/registry.hpp"
#include "mk_emu/mma.hpp"
#include "models/error.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/op_kernels.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "scheduler/compile.hpp"
#include "tests/instructions/op_backend.hpp"

namespace mk {

namespace {

template <typename T>
DeviceBuffer upload(const std::vector<T>& host, const char* what) {
    DeviceBuffer d(std::max<uint64_t>(host.size() * sizeof(T), 16), what);
    if (!host.empty()) d.upload(host.data(), host.size() * sizeof(T), what);
    return d;
}

template <typename T>
void download(std::vector<T>& host, const DeviceBuffer& d, const char* what) {
    check_cuda(cudaMemcpy(host.data(), d.as<void>(), host.size() * sizeof(T), cudaMemcpyDeviceToHost), what);
}

class EmuOpBackend final : public OpBackend {
public:
    explicit EmuOpBackend(mk_emu::MmaSums sums) : sums_(sums) {}
    std::string name() const override {
        return sums_ == mk_emu::MmaSums::rounded ? "cuda-emu" : "cuda-emu (truncated MMA sums)";
    }
    // MMA tiles take each fp32 input as bf16 hi + lo, within 2^-17 of it (rows_math.cuh's split_bf16_pair): a dot's
    // error is then up to ~2^-17 of its terms' sum, not of the dot, and gate/up multiplies two such dots; measured up to
    // 1.13e-5 of the largest output on the cases (a Q4_1 gate/up pair of 256 columns), over the ops' 1e-5 alone.
    double extra_rel(const Instruction& ins, const OpBuffers& b) const override {
        const std::vector<WeightFormat> padded = padded_row_formats(b.formats, kDeviceRowAlign);  // as run() uploads
        PlanInputs in = b.plan_inputs();
        in.weights = padded.data();
        const PagePlan plan = op_info(ins.opcode).page_plan(ins, in);
        return !plan.tiles.empty() && !plan.tiles[0].whole_rows() ? 2e-5 : 0.0;
    }
    bool accepts(const Instruction& ins, const OpBuffers& b) const override {
        if (!has_device_code(ins.opcode)) return false;  // an MK_HOST_OP runs on the CPU only
        for (size_t id = 0; id < b.formats.size(); ++id)
            if (!b.weights[id].empty() && !device_supports(DType(b.formats[id].dtype))) return false;
        return true;
    }

    void run(const Instruction& ins, OpBuffers& b) override {
        const OpInfo& op = op_info(ins.opcode);
        check_weight_ids(ins, b.formats);
        // The CUDA backend's weight layout: rows padded to kDeviceRowAlign, one blob.
        const std::vector<WeightFormat> padded = padded_row_formats(b.formats, kDeviceRowAlign);
        std::vector<std::vector<uint8_t>> rows(b.formats.size());
        std::vector<WeightRef> refs(b.formats.size());
        for (size_t id = 0; id < b.formats.size(); ++id) {
            const WeightFormat &f = b.formats[id], &p = padded[id];
            if (b.weights[id].empty()) continue;
            rows[id].assign(uint64_t(p.rows) * p.row_bytes, 0);
            for (uint32_t r = 0; r < f.rows; ++r)
                std::memcpy(rows[id].data() + uint64_t(r) * p.row_bytes, b.weights[id].data() + uint64_t(r) * f.row_bytes,
                            f.row_bytes);
            refs[id] = {rows[id].data(), DType(p.dtype), p.rows, p.cols, p.row_bytes};
        }
        const WeightBlob blob = build_weight_blob(refs);
        const DeviceBuffer blob_dev = upload(blob.bytes, "weights");
        const DeviceBuffer weights_dev = upload(device_weights(blob, blob_dev.as<uint8_t>()), "weight table");

        const PagePlan plan = op.page_plan(ins, PlanInputs{padded.data(), b.page_bytes, b.max_pages});
        std::vector<DeviceTile> tiles;
        for (const Tile& t : plan.tiles) tiles.push_back(device_tile(t, blob, op.describe(ins)));
        const DeviceBuffer tiles_dev = upload(tiles, "tiles");
        const DeviceBuffer tile_begin_dev = upload(std::vector<uint32_t>{0, uint32_t(tiles.size())}, "tile index");
        const DeviceBuffer ins_dev = upload(std::vector<Instruction>{ins}, "instruction");

        const DeviceBuffer arena = upload(b.arena, "arena"), k_cache = upload(b.stored_cache(Space::k_cache), "K cache"),
                           v_cache = upload(b.stored_cache(Space::v_cache), "V cache"), rope = upload(b.rope_inv_freq, "rope");
        // One allocation holds every rank's region, so every rank's entry holds the same bases.
        const std::vector<RankMemory> ranks(b.n_ranks, RankMemory{arena.as<uint8_t>(), k_cache.as<void>(),
                                                                  v_cache.as<void>(), nullptr});
        const DeviceBuffer ranks_dev = upload(ranks, "rank table");
        const DeviceBuffer step = upload(std::vector<int32_t>{b.step.pos, b.step.token, b.step.n_tokens}, "step state");

        BatchLaunch l{};
        l.opcode = ins.opcode;  // the op's own kernel (run_op_batch<Op>)
        l.instructions = ins_dev.as<Instruction>();
        l.tile_begin = tile_begin_dev.as<uint32_t>();
        l.tiles = tiles_dev.as<DeviceTile>();
        l.weight_blob = blob_dev.as<uint8_t>();
        l.ctx.dims = b.dims;
        l.ctx.rope_inv_freq = rope.as<float>();
        l.ctx.arena = arena.as<uint8_t>();
        l.ctx.ranks = ranks_dev.as<RankMemory>();
        l.ctx.weights = weights_dev.as<DeviceWeight>();
        l.ctx.k_cache = k_cache.as<void>();
        l.ctx.v_cache = v_cache.as<void>();
        l.ctx.ctx_len = b.ctx_len;
        l.step_state = step.as<int32_t>();
        l.count = 1;
        l.threads = kBatchMaxThreads;
        l.scratch_bytes = uint32_t(op_scratch_bytes(b.dims));
        struct SumsMode {  // this backend's mode for the launch, the default again after it (or a throw)
            explicit SumsMode(mk_emu::MmaSums mode) { mk_emu::mma_sums() = mode; }
            ~SumsMode() { mk_emu::mma_sums() = mk_emu::MmaSums::rounded; }
        } mode(sums_);
        check_cuda(launch_instruction_batch(l, nullptr), "launching the op on the emulator");
        check_cuda(cudaDeviceSynchronize(), "running the op on the emulator");
        download(b.arena, arena, "arena");
        for (const auto& [space, cache] : {std::pair{Space::k_cache, &k_cache}, std::pair{Space::v_cache, &v_cache}}) {
            std::vector<uint8_t> stored = b.stored_cache(space);
            download(stored, *cache, space == Space::k_cache ? "K cache" : "V cache");
            b.load_stored_cache(space, stored.data());
        }
    }

private:
    mk_emu::MmaSums sums_;
};

}  // namespace

std::unique_ptr<OpBackend> make_emu_op_backend(bool truncated_mma_sums) {
    return std::make_unique<EmuOpBackend>(truncated_mma_sums ? mk_emu::MmaSums::truncated : mk_emu::MmaSums::rounded);
}

}  // namespace mk

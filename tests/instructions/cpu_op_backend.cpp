// The CPU backend of the op test: the op's run_cpu with its page plan's tiles staged through checked pages.
#include "instructions/op_context.hpp"
#include "runtime/cpu/tile_readers.hpp"
#include "tests/instructions/op_backend.hpp"

namespace mk {

namespace {

class CpuOpBackend final : public OpBackend {
public:
    explicit CpuOpBackend(CpuDots dots) : dots_(dots) {}
    std::string name() const override { return dots_ == CpuDots::exact ? "cpu" : "cpu-q16"; }
    // q16 rounds the activations to 16-bit blocks: up to 5.9e-5 of an output range's largest value on these
    // cases (measured with no allowance), so 1e-4.
    double extra_rel(const Instruction&, const OpBuffers&) const override { return dots_ == CpuDots::exact ? 0.0 : 1e-4; }

    void run(const Instruction& ins, OpBuffers& b) override {
        const OpInfo& op = op_info(ins.opcode);
        check_weight_ids(ins, b.formats);
        std::vector<WeightRef> weights;
        for (size_t id = 0; id < b.formats.size(); ++id) {
            const WeightFormat& f = b.formats[id];
            weights.push_back({b.weights[id].data(), DType(f.dtype), f.rows, f.cols, f.row_bytes});
        }
        const PagePlan plan = op.page_plan(ins, b.plan_inputs());
        SmPages pages(b.max_pages, b.page_bytes);
        CheckedTileReader tiles(b.max_pages);
        tiles.begin(pages, plan, weights.data());
        // One allocation holds every rank's region: each rank's entry is its base unbiased.
        std::vector<uint8_t*> ranks(b.n_ranks, b.arena.data());
        OpContext ctx;
        ctx.dims = &b.dims;
        ctx.rope_inv_freq = b.rope_inv_freq.data();
        ctx.arena = b.arena.data();
        ctx.rank_arenas = ranks.data();
        ctx.weights = weights.data();
        std::vector<uint8_t> k_cache = b.stored_cache(Space::k_cache), v_cache = b.stored_cache(Space::v_cache);
        ctx.k_cache = k_cache.data();
        ctx.v_cache = v_cache.data();
        ctx.ctx_len = b.ctx_len;
        ctx.step = &b.step;
        ctx.plan = &plan;
        ctx.tiles = &tiles;
        ctx.dots = dots_;
        op.run_cpu(ins, ctx);
        tiles.end();
        b.load_stored_cache(Space::k_cache, k_cache.data());
        b.load_stored_cache(Space::v_cache, v_cache.data());
    }

private:
    CpuDots dots_;
};

}  // namespace

std::unique_ptr<OpBackend> make_cpu_op_backend(CpuDots dots) { return std::make_unique<CpuOpBackend>(dots); }

std::vector<std::unique_ptr<OpBackend>> op_backends() {
    std::vector<std::unique_ptr<OpBackend>> out;
    out.push_back(make_cpu_op_backend(CpuDots::exact));
    out.push_back(make_cpu_op_backend(CpuDots::q16));
#if MK_OP_TEST_EMU
    out.push_back(make_emu_op_backend());
    out.push_back(make_emu_op_backend(/*truncated_mma_sums=*/true));
#endif
    return out;
}

}  // namespace mk

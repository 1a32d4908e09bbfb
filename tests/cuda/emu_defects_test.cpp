// Defects planted in a real schedule, run by the resident interpreter on the CUDA emulator (tag [cuda][emu]):
// each ends in a report that names what waits and where, never a hang. And what only the emulator can count:
// the kernel-per-op baseline's launches overlap by programmatic dependent launch.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <span>

#include <mk_emu/emulator.hpp>

#include "instructions/registry.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/backend.hpp"
#include "runtime/program.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/op_kernels.hpp"

namespace mk {
namespace {

Model tiny_model() {
    const auto path = std::filesystem::temp_directory_path() / "mk_emu_defects_tiny_llama_f32.gguf";
    if (!std::filesystem::exists(path)) write_synthetic_model(parse_synthetic_spec("synthetic:tiny-llama:f32:seed=41"), path);
    return load_model(path);
}

Schedule compiled(const Model& model) {
    api::BackendOptions o;
    o.backend = "cuda-emu";
    return resolve_schedule(model, o);
}

// The first instruction that waits for another's results (not embed's wait for the previous token).
Instruction& first_real_wait(Schedule& s) {
    for (auto& stream : s.streams)
        for (Instruction& ins : stream)
            if (ins.n_waits > 0 && Opcode(ins.opcode) != Opcode::embed) return ins;
    FAIL("no wait in the schedule");
    return s.streams[0][0];
}

}  // namespace

TEST_CASE("CUDA emulator: a removed signal is refused on the host, a wait nobody meets ends in a report", "[cuda][emu]") {
    Model model = tiny_model();
    {
        Schedule s = compiled(model);
        const uint16_t counter = first_real_wait(s).waits[0].counter;
        bool removed = false;
        for (auto& stream : s.streams)
            for (Instruction& ins : stream)
                for (uint32_t g = 0; g < ins.n_signals && !removed; ++g)
                    if (ins.signals[g].counter == counter) {
                        ins.signals[g] = ins.signals[--ins.n_signals];
                        removed = true;
                    }
        REQUIRE(removed);
        CHECK_THROWS_WITH(make_cuda_program(model, s, CudaProgramOptions{}), Catch::Contains("step_total"));
    }
    Schedule s = compiled(model);
    first_real_wait(s).waits[0].target += 1000;  // never reached
    for (bool stepwise : {false, true}) {
        INFO((stepwise ? "stepwise" : "resident"));
        // The kernel's own watchdog (virtual time on the emulator) names the stuck wait.
        CudaProgramOptions co;
        co.watchdog_ms = 200;
        co.stepwise = stepwise;
        CHECK_THROWS_WITH(make_cuda_program(model, s, co)->step(1, 0, {}, {}),
                          Catch::Contains("CUDA watchdog") && Catch::Contains("counter"));
        // With the watchdog out of reach, the emulator itself reports the spin nobody can end.
        co.watchdog_ms = 3600 * 1000;
        CHECK_THROWS_WITH(make_cuda_program(model, s, co)->step(1, 0, {}, {}),
                          Catch::Contains("deadlock") && Catch::Contains("sync.cuh") &&
                              Catch::Contains("polling device allocation"));
    }
}

}  // namespace mk

namespace mk {

// The host's abort: with the device's watchdog off (0: a wait may last forever) a stuck wait never faults on
// its own, so after the host's bound (4 x watchdog + 10 s, measured on the emulator's virtual clock) the host
// raises the abort flag in the mailbox; the waiting thread sees it and ends the kernel with fault flag 2, the
// host's report naming the stuck counter, within the abort's grace (max(watchdog, 2 s) + 1 s).
TEST_CASE("CUDA emulator: the host aborts a kernel stuck without a watchdog, and it ends with a report", "[cuda][emu]") {
    const mk_emu::Config saved = mk_emu::config();
    mk_emu::Config c = saved;
    c.spin_limit_ns = 3600ull * 1000000000ull;  // the emulator's own deadlock report must not come first
    mk_emu::configure(c);
    Model model = tiny_model();
    Schedule s = compiled(model);
    first_real_wait(s).waits[0].target += 1000;  // never reached
    for (bool stepwise : {false, true}) {
        INFO((stepwise ? "stepwise" : "resident"));
        CudaProgramOptions co;
        co.watchdog_ms = 0;
        co.stepwise = stepwise;
        auto program = make_cuda_program(model, s, co);
        const uint64_t t0 = mk_emu::virtual_now_ns();
        CHECK_THROWS_WITH(program->step(1, 0, {}, {}), Catch::Contains("aborted by the host") &&
                                                           Catch::Contains("counter") && !Catch::Contains("deadlock"));
        const double waited_s = double(mk_emu::virtual_now_ns() - t0) / 1e9;
        CHECK(waited_s >= 10.0);       // not before the host's bound
        CHECK(waited_s <= 10.0 + 3.0);  // and the kernel ended within the abort's grace
        // The device is usable again: the broken program relaunches, a correct one runs.
        CHECK_THROWS(program->step(1, 0, {}, {}));
    }
    Schedule good = compiled(model);
    CHECK_NOTHROW(make_cuda_program(model, good, CudaProgramOptions{})->step(1, 0, {}, {}));
    mk_emu::configure(saved);
}

// The baseline's every launch after a step's first is programmatic, and on the emulator such a kernel starts
// before the one it follows has ended (its blocks release it first thing), so its griddepcontrol.wait is what
// orders its reads: with the wait removed from op_kernels.cu, [cuda][forward]'s kernels and graph modes miss the
// CPU's logits by 0.65 rel. L2 (measured). Here: the launches are programmatic, most start early, and the
// logits still equal the CPU's, on the tiny model and on one whose long rows (512 and 1024 F32 columns: 8 and 4
// rows per 16 KiB tile) make stage_shape deal a record's tiles to several blocks (one step, without the graph:
// its 200 blocks of 256 fibers each cost the emulator ~10 s a step).
TEST_CASE("CUDA emulator: the kernel-per-op baseline's kernels start before their predecessor ends, and match the CPU",
          "[cuda][emu]") {
    Model long_rows = load_model([] {
        const auto path = std::filesystem::temp_directory_path() / "mk_emu_long_rows_f32.gguf";
        if (!std::filesystem::exists(path))
            write_synthetic_model(
                parse_synthetic_spec("synthetic:tiny-llama:f32:d_model=512:ff=1024:layers=1:seed=43"), path);
        return path;
    }());
    Model tiny = tiny_model();
    for (Model* model : {&tiny, &long_rows}) {
        INFO(model->path.filename().string());
        const Schedule s = compiled(*model);
        // Blocks per record that stage_shape gives the schedule's matvecs: > 1 on the long rows.
        uint32_t records = 0, blocks = 0;
        for (const auto& stream : s.streams)
            for (const Instruction& ins : stream) {
                const Opcode op = Opcode(ins.opcode);
                if (op != Opcode::matvec_add && op != Opcode::rms_gate_up) continue;
                const PlanInputs in = plan_inputs(s.target, s.weights.data());
                const PagePlan plan = op_info(ins.opcode).page_plan(ins, in);
                REQUIRE(!plan.tiles.empty());
                const DeviceTile first{0, uint32_t(plan.tiles[0].bytes), plan.tiles[0].weight, plan.tiles[0].row_begin,
                                       plan.tiles[0].n_rows};
                const StageShape shape = stage_shape(ins, &first, 512);
                ++records;
                blocks += shape.tiles_per_block ? uint32_t(plan.tiles.size() + shape.tiles_per_block - 1) /
                                                      shape.tiles_per_block : 1;
            }
        WARN("matvec records " << records << ", blocks " << blocks);
        if (model == &long_rows) CHECK(blocks >= 2 * records);

        const int32_t n_steps = model == &tiny ? 2 : 1;
        std::vector<std::vector<float>> want;
        auto cpu = make_cpu_program(*model, s, ProgramOptions{});
        for (int32_t p = 0; p < n_steps; ++p) {
            cpu->step(1 + p, p, {}, {});
            want.emplace_back(cpu->logits().begin(), cpu->logits().end());
        }
        for (bool graph : {false, true}) {
            if (graph && model != &tiny) continue;
            INFO((graph ? "graph" : "kernels"));
            CudaKernelsOptions ko;
            ko.graph = graph;
            auto program = make_cuda_kernels_program(*model, s, ko);
            CHECK(std::string(program->backend_name()).ends_with("+pdl"));
            const mk_emu::ProgrammaticLaunches before = mk_emu::programmatic_launches();
            for (int32_t p = 0; p < n_steps; ++p) {
                program->step(1 + p, p, {}, {});
                const std::span<const float> got = program->logits();
                REQUIRE(got.size() == want[size_t(p)].size());
                double diff = 0, norm = 0;
                for (size_t i = 0; i < got.size(); ++i)
                    diff += (got[i] - want[size_t(p)][i]) * (got[i] - want[size_t(p)][i]), norm += got[i] * got[i];
                CHECK(std::sqrt(diff / norm) < 1e-4);  // fp32 sums on both sides, in another order
            }
            const mk_emu::ProgrammaticLaunches after = mk_emu::programmatic_launches();
            const uint64_t launched = after.launched - before.launched;
            const uint64_t early = after.started_early - before.started_early;
            WARN("programmatic launches " << launched << ", started early " << early);
            CHECK(launched >= uint64_t(n_steps) * 8);  // > 8 op stages a step
            CHECK(2 * early > launched);
        }
    }
}

}  // namespace mk

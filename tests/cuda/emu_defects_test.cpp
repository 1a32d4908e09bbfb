// Defects planted in a real schedule, run by the resident interpreter on the CUDA emulator (tag [cuda][emu]):
// each ends in a report that names what waits and where, never a hang.
#include <catch2/catch.hpp>

#include <filesystem>

#include <mk_emu/emulator.hpp>

#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/api/backend.hpp"
#include "runtime/cuda/cuda_program.hpp"

namespace mk {
namespace {

Model tiny_model() {
    const auto path = std::filesystem::temp_directory_path() / "mk_emu_defects_tiny_llama_f32.gguf";
    if (!std::filesystem::exists(path)) write_synthetic_model(parse_synthetic_spec("synthetic:tiny-llama:f32:seed=41"), path);
    return load_model(path);
}

// The schedule with the first signal of the first instruction some other instruction waits on removed.
Schedule without_a_signal(const Model& model) {
    api::BackendOptions o;
    o.backend = "cuda-emu";
    Schedule s = resolve_schedule(model, o);
    for (auto& stream : s.streams)
        for (const Instruction& ins : stream)
            if (ins.n_waits > 0 && Opcode(ins.opcode) != Opcode::embed) {
                const uint16_t counter = ins.waits[0].counter;
                for (auto& other : s.streams)
                    for (Instruction& signaller : other)
                        for (uint32_t g = 0; g < signaller.n_signals; ++g)
                            if (signaller.signals[g].counter == counter) {
                                signaller.signals[g] = signaller.signals[signaller.n_signals - 1];
                                --signaller.n_signals;
                                return s;
                            }
            }
    FAIL("no waited-on counter");
    return s;
}

}  // namespace

TEST_CASE("CUDA emulator: a removed counter signal ends in a report, by the watchdog or by the emulator", "[cuda][emu]") {
    Model model = tiny_model();
    const Schedule s = without_a_signal(model);
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

// The CUDA backends on a real GPU (tag [cuda]: never run by ctest here; tools/gpu-check.sh runs
// them stage by stage on a lent H200). Every GPU result is checked against the CPU backend on the
// same synthetic model: teacher-forced logits, greedy tokens where the margin is clear, and the
// resident device-side loop against the stepwise mode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "models/error.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/backend.hpp"
#include "runtime/engine.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/probe.hpp"
#include "instructions/common/token_rows.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "scheduler/compile.hpp"
#include "tests/cuda/cuda_test_config.hpp"
#include "tests/test_compare.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

namespace mk {
namespace {

std::filesystem::path work_dir() {
    const char* env = std::getenv("MK_CUDA_TEST_DIR");
    std::filesystem::path dir = env && *env ? env : std::filesystem::temp_directory_path() / "mk-cuda-tests";
    std::filesystem::create_directories(dir);
    return dir;
}

Model synthetic(const std::string& spec) {
    std::string file = spec;
    for (char& c : file)
        if (c == ':' || c == '=') c = '_';
    const auto path = work_dir() / (file + ".gguf");
    if (!std::filesystem::exists(path)) write_synthetic_model(parse_synthetic_spec(spec), path);
    return load_model(path);
}

std::unique_ptr<Program> program_for(const Model& model, const std::string& backend, bool stepwise = false,
                                     bool graph = false, const std::string& kv_type = "") {
    api::BackendOptions o;
    o.backend = test::cuda_backend(backend);
    o.stepwise = stepwise;
    o.graph = graph;
    o.kv_type = kv_type;
    o.ctx_len = 512;
    o.threads = std::max(1u, std::thread::hardware_concurrency());
    o.cpu_dots = "exact";  // the CPU reference in fp32, as the GPU computes
    return make_program(model, o);
}

std::vector<int32_t> test_tokens(const Model& model, int n) {
    std::vector<int32_t> out;
    for (int p = 0; p < n; ++p) out.push_back(int32_t((uint64_t(p) * 7919 + 13) % uint64_t(model.config.vocab_size)));
    return out;
}

std::vector<std::vector<float>> teacher_forced(Program& program, const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> out;
    for (size_t p = 0; p < tokens.size(); ++p) {
        program.step(tokens[p], int32_t(p), {}, {});
        out.emplace_back(program.logits().begin(), program.logits().end());
    }
    return out;
}

// Logits within `tol` (rel. L2) at every step; the argmax equal wherever the reference's top-2 margin
// exceeds 5 * tol * rms(logits) (random weights give near-ties that a rounding difference may flip).
void check_against(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, double tol,
                   const std::string& what) {
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t p = 0; p < want.size(); ++p) {
        const double err = test::rel_l2(got[p], want[p]);
        worst = std::max(worst, err);
        INFO(what << " step " << p);
        CHECK(err <= tol);
        std::vector<float> sorted = want[p];
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        double rms = 0;
        for (float v : want[p]) rms += double(v) * v;
        rms = std::sqrt(rms / double(want[p].size()));
        if (sorted[0] - sorted[1] > 5 * tol * rms) {
            const auto argmax = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
            CHECK(argmax(got[p]) == argmax(want[p]));
        }
    }
    WARN(what << ": worst rel. L2 vs CPU " << worst);
}

// The four CUDA modes the forward tests run.
struct Mode {
    const char* name;
    const char* backend;
    bool stepwise, graph;
};
constexpr Mode kModes[] = {{"resident", "cuda", false, false}, {"stepwise", "cuda", true, false},
                           {"kernels", "cuda-kernels", false, false}, {"graph", "cuda-kernels", false, true}};

}  // namespace

TEST_CASE("CUDA smoke: the device is usable and one step matches the CPU", "[cuda][smoke]") {
    const cuda::DeviceProbe probe = cuda::probe_device();
    INFO(probe.message);
    REQUIRE(probe.available);
    REQUIRE(probe.kernel_ran);
    WARN(probe.name << ": " << probe.sm_count << " SMs, " << probe.smem_optin_bytes << " bytes opt-in shared memory");
    Model model = synthetic("synthetic:tiny-llama:f32:seed=21");
    const std::vector<int32_t> tokens = test_tokens(model, 3);
    auto cpu = program_for(model, "cpu");
    const auto want = teacher_forced(*cpu, tokens);
    for (bool stepwise : {true, false}) {
        auto gpu = program_for(model, "cuda", stepwise);
        check_against(teacher_forced(*gpu, tokens), want, 1e-4, stepwise ? "tiny f32 stepwise" : "tiny f32 resident");
    }
}

// What tools/gpu-check.sh runs under compute-sanitizer (memcheck, synccheck, racecheck): the smallest
// model, two stepwise launches (a kernel that ends, so the tools see its whole life), checked against the CPU.
TEST_CASE("CUDA sanitize: two stepwise steps of the tiny model match the CPU", "[cuda][sanitize]") {
    Model model = synthetic("synthetic:tiny-llama:f32:seed=21");
    const std::vector<int32_t> tokens = test_tokens(model, 2);
    auto cpu = program_for(model, "cpu");
    auto gpu = program_for(model, "cuda", true);
    check_against(teacher_forced(*gpu, tokens), teacher_forced(*cpu, tokens), 1e-4, "tiny f32 stepwise");
}

TEST_CASE("CUDA smoke: the watchdog ends an unmeetable wait with a fault report, not a hang", "[cuda][smoke]") {
    Model model = synthetic("synthetic:tiny-llama:f32:seed=21");
    api::BackendOptions o;
    o.backend = test::cuda_backend("cuda");
    Schedule s = resolve_schedule(model, o);
    bool broken = false;
    for (auto& stream : s.streams)
        for (Instruction& ins : stream)
            if (!broken && ins.n_waits > 0) {
                ins.waits[0].target += 1000000;  // never reached
                broken = true;
            }
    REQUIRE(broken);
    for (bool stepwise : {false, true}) {
        CudaProgramOptions co;
        co.watchdog_ms = 300;
        co.stepwise = stepwise;
        auto program = make_cuda_program(model, s, co);
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH(program->step(1, 0, {}, {}), Catch::Contains("CUDA watchdog") && Catch::Contains("counter"));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CHECK(seconds < 10.0);
    }
    // The CUDA context is not poisoned: a correct program still runs.
    auto good = program_for(model, "cuda");
    CHECK_NOTHROW(good->step(1, 0, {}, {}));
}

TEST_CASE("CUDA forward: every CUDA mode matches the CPU backend, teacher-forced", "[cuda][forward]") {
    const std::vector<std::string> specs = test::device_or_emu<std::vector<std::string>>(
        {"synthetic:smollm2-135m:bf16:seed=22", "synthetic:llama-3.2-1b:bf16:layers=4:seed=23",
         "synthetic:smollm2-135m:q8_0:layers=6:seed=24", "synthetic:smollm2-135m:q4_1:layers=6:seed=25"},
        {"synthetic:tiny-llama:bf16:seed=22", "synthetic:tiny-qwen3:f16:seed=23", "synthetic:tiny-llama:q8_0:seed=24",
         "synthetic:tiny-qwen2:q4_1:seed=25", "synthetic:tiny-llama:q4_0:seed=26"});
    for (const std::string& spec : specs) {
        Model model = synthetic(spec);
        const std::vector<int32_t> tokens = test_tokens(model, test::device_or_emu(12, 4));
        auto cpu = program_for(model, "cpu");
        const auto want = teacher_forced(*cpu, tokens);
        for (const Mode& m : kModes) {
            auto gpu = program_for(model, m.backend, m.stepwise, m.graph);
            check_against(teacher_forced(*gpu, tokens), want, 1e-2, spec + " " + m.name);
        }
    }
}

// A bf16 KV cache (--kv-type bf16) in every CUDA mode against the CPU backend's bf16 cache: the same greedy
// tokens where the margin is clear and logits within 1e-2 (rel. L2; K and V are rounded to bf16 on both sides,
// and a value summed in another order may round the other way). The bf16 cache must change the logits against
// the f32 one, or the type never reached the ops.
TEST_CASE("CUDA forward: a bf16 KV cache matches the CPU's bf16 cache in every CUDA mode", "[cuda][forward][kv]") {
    const std::vector<std::string> specs = test::device_or_emu<std::vector<std::string>>(
        {"synthetic:llama-3.2-1b:bf16:layers=4:seed=27", "synthetic:smollm2-135m:q8_0:layers=6:seed=28"},
        {"synthetic:tiny-llama:bf16:seed=27", "synthetic:tiny-qwen3:f16:seed=28"});
    for (const std::string& spec : specs) {
        Model model = synthetic(spec);
        const std::vector<int32_t> tokens = test_tokens(model, test::device_or_emu(12, 4));
        auto cpu = program_for(model, "cpu", false, false, "bf16");
        REQUIRE(cpu->schedule().dims.kv_type == uint32_t(KvType::bf16));
        const auto want = teacher_forced(*cpu, tokens);
        auto cpu_f32 = program_for(model, "cpu");
        const auto f32 = teacher_forced(*cpu_f32, tokens);
        CHECK(test::rel_l2(want.back(), f32.back()) > 0.0);
        for (const Mode& m : kModes) {
            auto gpu = program_for(model, m.backend, m.stepwise, m.graph, "bf16");
            REQUIRE(gpu->schedule().dims.kv_type == uint32_t(KvType::bf16));
            check_against(teacher_forced(*gpu, tokens), want, 1e-2, spec + " bf16 KV " + m.name);
        }
    }
}

// The real model (Q4_1 matrices, Q8_0 embedding and LM head, 30 layers): the resident kernel's logits
// teacher-forced against the CPU's exact fp32 dots. Not [model], so the emulated suite runs it in CI on the
// emulator's default 8 SMs (2 steps there).
TEST_CASE("CUDA forward: SmolLM2-135M teacher-forced matches the CPU backend", "[cuda][forward][smollm2]") {
    MK_SKIP_IF_MISSING(test::default_model_path(), "tools/setup.sh --test");
    Model model = load_model(test::default_model_path());
    std::vector<int32_t> tokens = model.tokenizer.encode("The capital of France is");
    tokens.resize(test::device_or_emu<size_t>(tokens.size(), 2));
    auto cpu = program_for(model, "cpu");
    const auto want = teacher_forced(*cpu, tokens);
    auto gpu = program_for(model, "cuda");
    // fp32 on both sides, summed in another order: 1e-3 (rel. L2), well above the measured difference.
    check_against(teacher_forced(*gpu, tokens), want, 1e-3, "SmolLM2-135M resident");
}

TEST_CASE("CUDA resident: a device-side generation (128 tokens, 32 emulated) equals the stepwise mode", "[cuda][resident]") {
    Model model = synthetic(test::device_or_emu<std::string>("synthetic:smollm2-135m:bf16:layers=8:seed=26",
                                                             "synthetic:tiny-llama:bf16:layers=2:seed=26"));
    const std::vector<int32_t> prompt = test_tokens(model, 8);
    const uint32_t n_new = test::device_or_emu(128u, 32u);
    api::BackendOptions o;
    o.backend = test::cuda_backend("cuda");
    o.ctx_len = 512;
    const Schedule s = resolve_schedule(model, o);
    CudaProgramOptions resident_options;
    resident_options.ctx_len = 512;

    // One resident megakernel per device: each program below ends before the next one starts.
    std::vector<int32_t> streamed, generated;
    {
        auto resident = make_cuda_program(model, s, resident_options);
        const auto t0 = std::chrono::steady_clock::now();
        generated = resident
                        ->run_generation(prompt, n_new, {}, [&](int32_t t) { streamed.push_back(t); return true; }, nullptr)
                        .tokens;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        WARN("resident generate: 8 prompt + " << n_new << " new tokens in " << seconds * 1000 << " ms");
        CHECK(streamed == generated);
        REQUIRE(generated.size() == n_new);
        // A second live resident megakernel on this device could never start: it is refused, naming the first.
        CHECK_THROWS_WITH(make_cuda_program(model, s, resident_options),
                          Catch::Contains("already runs the resident megakernel"));
    }

    std::vector<int32_t> expected;
    {
        CudaProgramOptions stepwise_options = resident_options;
        stepwise_options.stepwise = true;
        auto stepwise = make_cuda_program(model, s, stepwise_options);
        int32_t next = 0;
        for (size_t p = 0; p < prompt.size(); ++p) next = stepwise->step(prompt[p], int32_t(p), {}, {});
        for (int32_t p = int32_t(prompt.size()); expected.size() < n_new; ++p) {
            expected.push_back(next);
            if (expected.size() < n_new) next = stepwise->step(next, p, {}, {});
        }
    }
    CHECK(generated == expected);

    // A stop token ends the device-side run early, and the program carries on from where it stopped.
    {
        auto stopping = make_cuda_program(model, s, resident_options);
        const std::vector<int32_t> stop = {expected[5]};
        const auto first = std::find(expected.begin(), expected.end(), expected[5]);
        const DeviceLoopResult r = stopping->run_generation(prompt, n_new, stop, {}, nullptr);
        CHECK(r.tokens == std::vector<int32_t>(expected.begin(), first + 1));
        CHECK(r.stopped);
        CHECK(r.n_steps == prompt.size() + size_t(first - expected.begin()));
        CHECK_NOTHROW(stopping->step(1, int32_t(r.n_steps), {}, {}));
    }

    // mk generate's path: the Engine runs the whole generation as one device command.
    Engine engine(model, make_cuda_program(model, s, resident_options));
    REQUIRE(engine.program().runs_generation(SamplingParams{}, 0));
    GenerateOptions go;
    go.n_predict = int32_t(n_new);
    go.stop_at_eog = false;
    const GenerateStats stats = engine.generate(prompt, go, [](std::string_view) { return true; });
    CHECK(stats.tokens == expected);
    CHECK(stats.n_past == int32_t(prompt.size() + n_new) - 1);
}

}  // namespace mk

namespace mk {
namespace {

// Every prompt token's logits through a program's prefill step in chunks of its T (all logits).
std::vector<std::vector<float>> prefilled(Program& program, const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> out;
    const uint32_t chunk = program.prefill_tokens();
    REQUIRE(chunk > 0);
    REQUIRE(program.prefill_all_logits());
    for (size_t i = 0; i < tokens.size(); i += chunk) {
        const size_t n = std::min<size_t>(chunk, tokens.size() - i);
        program.prefill(std::span(tokens.data() + i, n), int32_t(i));
        const std::span<const float> rows = program.prefill_logits();
        REQUIRE(rows.size() == n * program.schedule().dims.vocab);
        for (size_t j = 0; j < n; ++j)
            out.emplace_back(rows.begin() + std::ptrdiff_t(j * program.schedule().dims.vocab),
                             rows.begin() + std::ptrdiff_t((j + 1) * program.schedule().dims.vocab));
        // logits() after a chunk: its last token's.
        CHECK(test::rel_l2(std::vector<float>(program.logits().begin(), program.logits().end()), out.back()) == 0.0);
    }
    return out;
}

// A program on `backend` with a prefill step for chunks of T tokens keeping every token's logits (or, without
// all_logits, each chunk's last token's: the last layer then runs after attention for that token alone).
std::unique_ptr<Program> prefill_program(const Model& model, const std::string& backend, uint32_t chunk,
                                         const std::string& kv_type = "", bool all_logits = true) {
    api::BackendOptions o;
    o.backend = test::cuda_backend(backend);
    o.kv_type = kv_type;
    o.ctx_len = 64;
    o.threads = 2;
    o.cpu_dots = "exact";
    o.batch = chunk;
    o.all_logits = all_logits;
    if (chunk > 1) return make_program(model, o);
    // T = 1, which -b does not compile (the CLI runs that token by token): the prefill step by hand.
    Schedule s = resolve_schedule(model, o);
    Schedule prefill = compile_prefill_schedule(model.config, s.weights, s.target, parse_policy(o.policy), 1, true,
                                                KvType(s.dims.kv_type));
    if (backend == "cpu") return make_cpu_program(model, std::move(s), ProgramOptions{.n_threads = 2, .ctx_len = 64},
                                                  std::move(prefill));
    REQUIRE(backend == "cuda");
    return make_cuda_program(model, std::move(s), CudaProgramOptions{.ctx_len = 64}, std::move(prefill));
}

}  // namespace

// The prefill step on the device (resident kernel; the kernel-per-op baseline at one T) against the CPU backend's
// prefill step and its token-by-token path: every prompt token's logits within 1e-5 (rel. L2; fp32 sums in
// another order) for chunks of T in {1, 7, 16} over a 19-token prompt (short last chunks), then mk generate's
// path: prefill chunks, then the device loop, greedy tokens equal to the CPU's.
TEST_CASE("CUDA prefill: chunks of T tokens match the CPU's prefill and token-by-token logits", "[cuda][prefill]") {
    // Q4_1 at 64 columns (40-byte rows, 48 padded): whole-row MMA tiles, each one bulk copy of the loader; its 256-column
    // down projection in spans.
    for (const std::string spec : {"synthetic:tiny-llama:f32:seed=61", "synthetic:tiny-qwen3:bf16:seed=62",
                                   "synthetic:tiny-llama:q4_1:seed=64"}) {
        Model model = synthetic(spec);
        const std::vector<int32_t> prompt = test_tokens(model, 19);
        auto cpu = program_for(model, "cpu");
        const auto by_token = teacher_forced(*cpu, prompt);
        for (uint32_t chunk : {1u, 7u, 16u}) {
            const std::string what = spec + " T=" + std::to_string(chunk);
            auto cpu_prefill = prefill_program(model, "cpu", chunk);
            const auto want = prefilled(*cpu_prefill, prompt);
            check_against(want, by_token, 1e-5, what + " cpu prefill vs token by token");
            const auto got = prefilled(*prefill_program(model, "cuda", chunk), prompt);
            check_against(got, want, 1e-5, what + " resident vs cpu prefill");
            check_against(got, by_token, 1e-5, what + " resident vs token by token");
            if (chunk == 7) check_against(prefilled(*prefill_program(model, "cuda-kernels", chunk), prompt), want, 1e-5,
                                          what + " kernels vs cpu prefill");
            if (chunk > 1) {  // each chunk's last token's logits alone (19 = 7 + 7 + 5, 16 + 3: short last chunks)
                auto last_only = prefill_program(model, "cuda", chunk, "", false);
                std::vector<std::vector<float>> last, expected;
                for (size_t i = 0; i < prompt.size(); i += chunk) {
                    const size_t n = std::min<size_t>(chunk, prompt.size() - i);
                    last_only->prefill(std::span(prompt.data() + i, n), int32_t(i));
                    last.emplace_back(last_only->logits().begin(), last_only->logits().end());
                    expected.push_back(by_token[i + n - 1]);
                }
                check_against(last, expected, 1e-5, what + " resident, last token only, vs token by token");
            }
        }

        // One generation, as mk generate runs it: -b 7 (chunks 7 + 7 + 4, the last prompt token the device loop's
        // first step), greedy, against the CPU's.
        GenerateOptions go;
        go.n_predict = 6;
        go.stop_at_eog = false;
        auto generate = [&](const std::string& backend) {
            api::BackendOptions o;
            o.backend = backend == "cpu" ? backend : test::cuda_backend(backend);
            o.ctx_len = 64;
            o.cpu_dots = "exact";
            o.batch = 7;
            Engine engine(model, make_program(model, o));
            REQUIRE(engine.program().prefill_tokens() == 7);
            return engine.generate(prompt, go, [](std::string_view) { return true; });
        };
        const GenerateStats want = generate("cpu"), got = generate("cuda");
        INFO(spec);
        CHECK(got.tokens == want.tokens);
        CHECK(got.tokens.size() == 6);
        CHECK(got.n_past == want.n_past);
        // Passes over the weights: the CPU's 3 chunks (7 + 7 + 5) and 5 decode steps; the device's 3 chunks of the
        // first 18 tokens, then 6 steps of its loop (the prompt's last token and 5 generated ones).
        CHECK(want.n_weight_passes == 3 + 5);
        CHECK(got.n_weight_passes == 3 + 6);
    }
}

// A bf16 KV cache: rms_qkv_rows rounds each chunk's K/V once, after RoPE, as the CPU does, so the chunks' logits
// match the CPU's bf16-cache prefill within 1e-5 as well (a value summed in another order could round the other way:
// measured 0 here), and differ from the f32 cache's (the type reached the op).
TEST_CASE("CUDA prefill: a bf16 KV cache's chunks match the CPU's", "[cuda][prefill][kv]") {
    Model model = synthetic("synthetic:tiny-qwen2:bf16:seed=63");
    const std::vector<int32_t> prompt = test_tokens(model, 19);
    const auto want = prefilled(*prefill_program(model, "cpu", 7, "bf16"), prompt);
    const auto got = prefilled(*prefill_program(model, "cuda", 7, "bf16"), prompt);
    check_against(got, want, 1e-5, "tiny-qwen2 bf16 KV T=7 resident vs cpu prefill");
    const auto f32 = prefilled(*prefill_program(model, "cpu", 7), prompt);
    CHECK(test::rel_l2(want.back(), f32.back()) > 1e-6);

    // -b past what the scratch holds for the bf16 cache's K/V blocks runs as the largest chunk that fits.
    auto fitted = prefill_program(model, "cuda", 4096, "bf16");
    const uint32_t fits = fitted->prefill_tokens();
    const Schedule& s = fitted->schedule();
    CHECK(fits == device_prefill_limit(compile_prefill_schedule(model.config, s.weights, s.target,
                                                                parse_policy(api::BackendOptions{}.policy), 4096, true,
                                                                KvType::bf16)));
    REQUIRE(fits > 1);
    REQUIRE(fits < 4096);
    check_against(prefilled(*fitted, prompt), want, 1e-5, "tiny-qwen2 bf16 KV -b 4096 resident vs cpu prefill T=7");
}


// A block format's MMA passes stage their quants in the scratch's last kMmaStageFloats, past every token's vectors:
// the chunk limit leaves them free (and a bf16 cache's K/V blocks divide what is left), where BF16 weights need none.
TEST_CASE("CUDA prefill: the chunk limit leaves a block format's stage free", "[cuda][prefill][kv]") {
    for (const std::string kv : {"f32", "bf16"}) {
        const Model q8 = synthetic("synthetic:tiny-llama:q8_0:seed=5");
        const Model bf16 = synthetic("synthetic:tiny-llama:bf16:seed=5");
        auto limit = [&](const Model& model) {
            api::BackendOptions o;
            o.kv_type = kv;
            const Schedule s = resolve_schedule(model, o);
            return device_prefill_limit(compile_prefill_schedule(model.config, s.weights, s.target,
                                                                 parse_policy(o.policy), 64, true,
                                                                 KvType(s.dims.kv_type)));
        };
        const uint64_t floats = op_scratch_bytes(model_dims(q8.config)) / 4 - 64;
        INFO("kv " << kv << ", scratch floats past the reductions " << floats);
        CHECK(op_scratch_bytes(model_dims(q8.config)) >= 4 * 3840);
        if (kv == "f32") {
            CHECK(limit(bf16) == floats);
            CHECK(limit(q8) == floats - kMmaStageFloats - 4);
        } else {
            CHECK(limit(q8) < limit(bf16));
            CHECK(limit(q8) > 1);
        }
    }
}

}  // namespace mk

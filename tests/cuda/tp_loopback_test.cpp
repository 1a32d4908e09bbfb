// Tensor parallel on one GPU (tag [cuda][tp], run by tools/gpu-check.sh): the combined schedule of N ranks,
// each on its own partition of the device's SMs (--tp-loopback N), against the CPU backend at TP = 1 —
// teacher-forced logits within the CUDA forward tests' 1e-2 (rel. L2) and the same greedy tokens. The
// [gpus] cases run the ranks on separate GPUs (decode, and prefill chunks) and pass (with a warning) on a machine
// with fewer.
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "scheduler/compile.hpp"
#include "runtime/emu/emu_program.hpp"
#include "tests/cuda/cuda_test_config.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_compare.hpp"

namespace mk {
namespace {

constexpr double kTolerance = 1e-2;  // as the [cuda][forward] tests: bf16 dots in another order than the CPU's

Model synthetic(const std::string& spec) {
    const char* env = std::getenv("MK_CUDA_TEST_DIR");
    const std::filesystem::path dir = env && *env ? env : std::filesystem::temp_directory_path() / "mk-cuda-tests";
    std::filesystem::create_directories(dir);
    std::string file = spec;
    for (char& c : file)
        if (c == ':' || c == '=') c = '_';
    const auto path = dir / (file + ".gguf");
    if (!std::filesystem::exists(path)) write_synthetic_model(parse_synthetic_spec(spec), path);
    return load_model(path);
}

api::BackendOptions options(const std::string& backend, uint32_t tp_loopback) {
    api::BackendOptions o;
    o.backend = test::cuda_backend(backend);
    o.tp_loopback = tp_loopback;
    o.ctx_len = 256;
    o.threads = std::max(1u, std::thread::hardware_concurrency());
    o.cpu_dots = "exact";  // the CPU reference in fp32, as the GPU computes
    return o;
}

// The prompt, then the CPU's TP = 1 greedy continuation: every run is fed these (teacher-forced).
struct Reference {
    std::vector<int32_t> inputs;
    std::vector<int32_t> greedy;             // the token sampled after each input
    std::vector<std::vector<float>> logits;  // after each input
};

Reference cpu_reference(const Model& model, const std::vector<int32_t>& prompt, uint32_t n_new) {
    auto cpu = make_program(model, options("cpu", 0));
    Reference r;
    r.inputs = prompt;
    for (size_t p = 0; p < prompt.size() + n_new - 1; ++p) {
        r.greedy.push_back(cpu->step(r.inputs[p], int32_t(p), {}, {}));
        r.logits.emplace_back(cpu->logits().begin(), cpu->logits().end());
        if (p + 1 >= r.inputs.size()) r.inputs.push_back(r.greedy.back());
    }
    return r;
}

// A program for the N-rank loopback schedule, checked to hold N partitions of this device's SMs.
std::unique_ptr<Program> loopback_program(const Model& model, const std::string& backend, uint32_t tp, bool stepwise,
                                          bool graph) {
    api::BackendOptions o = options(backend, tp);
    o.stepwise = stepwise;
    o.graph = graph;
    Schedule s = resolve_schedule(model, o);
    REQUIRE(s.tp_size == tp);
    REQUIRE(s.target.n_sms == test::device_or_emu(current_device().sm_count / tp, kEmuDefaultSms));
    REQUIRE(s.streams.size() == size_t(tp) * s.target.n_sms);
    return make_program(model, std::move(s), o);
}

// Teacher-forced: logits within kTolerance at every step, and the greedy token the CPU's wherever its
// top-2 margin exceeds 5 * kTolerance * rms(logits) (random weights leave near-ties; `exact` demands all).
void check_teacher_forced(Program& gpu, const Reference& ref, bool exact, const std::string& what) {
    double worst = 0;
    for (size_t p = 0; p < ref.greedy.size(); ++p) {
        const int32_t token = gpu.step(ref.inputs[p], int32_t(p), {}, {});
        const std::vector<float> got(gpu.logits().begin(), gpu.logits().end());
        const std::vector<float>& want = ref.logits[p];
        REQUIRE(got.size() == want.size());
        const double err = test::rel_l2(got, want);
        worst = std::max(worst, err);
        INFO(what << " step " << p);
        CHECK(err <= kTolerance);
        std::vector<float> top = want;
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
        double rms = 0;
        for (float v : want) rms += double(v) * v;
        rms = std::sqrt(rms / double(want.size()));
        if (exact || top[0] - top[1] > 5 * kTolerance * rms) CHECK(token == ref.greedy[p]);
    }
    WARN(what << ": worst rel. L2 vs CPU TP=1 " << worst);
}

struct Mode {
    const char* name;
    const char* backend;
    bool stepwise, graph;
};
const Mode kResident{"resident", "cuda", false, false}, kStepwise{"stepwise", "cuda", true, false},
    kKernels{"kernels", "cuda-kernels", false, false}, kGraph{"graph", "cuda-kernels", false, true};

// The resident kernel's device-side loop: the prompt, then n_new tokens it feeds back itself.
std::vector<int32_t> device_generate(const Model& model, uint32_t tp, const std::vector<int32_t>& prompt,
                                     uint32_t n_new) {
    auto program = loopback_program(model, "cuda", tp, false, false);
    return program->run_generation(prompt, n_new, {}, {}, nullptr).tokens;
}

}  // namespace

TEST_CASE("CUDA TP loopback: TP=2 on the Llama-3.2-1B shape (tiny-llama emulated) matches the CPU at TP=1", "[cuda][tp]") {
    Model model = synthetic(test::device_or_emu<std::string>("synthetic:llama-3.2-1b:bf16:layers=2:vocab=4096:seed=31",
                                                             "synthetic:tiny-llama:bf16:seed=31"));
    const auto prompt = test::device_or_emu<std::vector<int32_t>>({1, 791, 2864, 315, 3822, 374}, {1, 279, 304, 315, 238, 374});
    const uint32_t tp = 2, n_new = test::device_or_emu(8u, 4u);
    const Reference ref = cpu_reference(model, prompt, n_new);
    for (const Mode& m : {kResident, kStepwise, kKernels, kGraph}) {
        auto gpu = loopback_program(model, m.backend, tp, m.stepwise, m.graph);
        check_teacher_forced(*gpu, ref, false, fmt::format("llama-3.2-1b bf16 TP=2 {}", m.name));
    }
    // Random weights leave near-ties, so the device-side loop is held to the stepwise kernel's own choices.
    std::vector<int32_t> expected;
    {  // ended before the resident program starts: a resident kernel has its device to itself
        auto stepwise = loopback_program(model, "cuda", tp, true, false);
        int32_t next = 0;
        for (size_t p = 0; p < prompt.size(); ++p) next = stepwise->step(prompt[p], int32_t(p), {}, {});
        for (int32_t p = int32_t(prompt.size()); expected.size() < n_new; ++p) {
            expected.push_back(next);
            if (expected.size() < n_new) next = stepwise->step(next, p, {}, {});
        }
    }
    CHECK(device_generate(model, tp, prompt, n_new) == expected);
}

// Three ranks need KV heads and FFN width divisible by 3: the SmolLM2 shape (9 heads, 3 KV heads, FFN 1536) cut
// to 2 layers on the device, a tiny llama with 6 heads, 3 KV heads and FFN 384 on the emulator.
TEST_CASE("CUDA TP loopback: TP=3 (the SmolLM2 shape, tiny emulated) matches the CPU at TP=1", "[cuda][tp]") {
    Model model = synthetic(test::device_or_emu<std::string>(
        "synthetic:smollm2-135m:bf16:layers=2:vocab=4096:seed=37",
        "synthetic:tiny-llama:bf16:d_model=96:heads=6:kv_heads=3:ff=384:seed=37"));
    const std::vector<int32_t> prompt = {1, 279, 304, 315, 238, 374};
    const uint32_t tp = 3, n_new = test::device_or_emu(8u, 3u);
    const Reference ref = cpu_reference(model, prompt, n_new);
    for (const Mode& m : {kResident, kKernels}) {
        auto gpu = loopback_program(model, m.backend, tp, m.stepwise, m.graph);
        check_teacher_forced(*gpu, ref, false, fmt::format("TP=3 {}", m.name));
    }
}

// A prompt in prefill chunks split across 3 ranks on one device (resident kernel and kernel-per-op baseline): every
// position's logits against the CPU's TP = 1 token by token, then a decode step from the prefilled caches.
TEST_CASE("CUDA TP loopback: TP=3 prefill chunks match the CPU at TP=1", "[cuda][tp][prefill]") {
    Model model = synthetic(test::device_or_emu<std::string>(
        "synthetic:smollm2-135m:bf16:layers=2:vocab=4096:seed=38",
        "synthetic:tiny-llama:bf16:d_model=96:heads=6:kv_heads=3:ff=384:seed=38"));
    const std::vector<int32_t> prompt = {1, 279, 304, 315, 238, 374, 12, 99, 7, 450, 31};
    const uint32_t tp = 3, chunk = 4;  // 11 tokens: chunks of 4, 4 and 3
    const Reference ref = cpu_reference(model, prompt, 2);
    for (const Mode& m : {kResident, kKernels}) {
        api::BackendOptions o = options(m.backend, tp);
        o.batch = chunk;
        o.all_logits = true;
        auto gpu = make_program(model, o);
        REQUIRE(gpu->prefill_tokens() == chunk);
        REQUIRE(gpu->schedule().tp_size == tp);
        double worst = 0;
        for (size_t i = 0; i < prompt.size(); i += chunk) {
            const size_t n = std::min<size_t>(chunk, prompt.size() - i);
            gpu->prefill(std::span(prompt.data() + i, n), int32_t(i));
            const std::span<const float> rows = gpu->prefill_logits();
            const size_t vocab = ref.logits[0].size();
            REQUIRE(rows.size() == n * vocab);
            for (size_t j = 0; j < n; ++j)
                worst = std::max(worst, test::rel_l2(std::vector<float>(rows.begin() + std::ptrdiff_t(j * vocab),
                                                                        rows.begin() + std::ptrdiff_t((j + 1) * vocab)),
                                                     ref.logits[i + j]));
        }
        INFO(m.name << ": worst rel. L2 of the prefill logits vs CPU TP=1 " << worst);
        CHECK(worst < 1e-5);
        // The next step reads every rank's prefilled KV cache.
        const size_t p = prompt.size();
        gpu->step(ref.inputs[p], int32_t(p), {}, {});
        CHECK(test::rel_l2(std::vector<float>(gpu->logits().begin(), gpu->logits().end()), ref.logits[p]) < 1e-5);
    }
}

TEST_CASE("CUDA TP loopback: TP=3 on SmolLM2-135M gives the CPU's greedy tokens", "[cuda][tp][model]") {
    Model model = load_model(test::default_model_path());
    const std::vector<int32_t> prompt = model.tokenizer.encode("The capital of France is");
    const uint32_t tp = 3, n_new = 8;
    const Reference ref = cpu_reference(model, prompt, n_new);
    for (const Mode& m : {kResident, kKernels}) {
        auto gpu = loopback_program(model, m.backend, tp, m.stepwise, m.graph);
        check_teacher_forced(*gpu, ref, true, fmt::format("SmolLM2-135M TP=3 {}", m.name));
    }
    const std::vector<int32_t> cpu_tokens(ref.greedy.end() - n_new, ref.greedy.end());
    CHECK(device_generate(model, tp, prompt, n_new) == cpu_tokens);
}

// On the emulator the program opens one emulated device per rank (cudaDeviceCanAccessPeer,
// cudaDeviceEnablePeerAccess: the host code the real GPUs run), each driven by the host's stream queries.
TEST_CASE("CUDA TP on separate GPUs: TP=2 on the Llama-3.2-1B shape matches the CPU at TP=1", "[cuda][tp][gpus]") {
    int count = 0;
    if (!test::kEmulated && (cudaGetDeviceCount(&count) != cudaSuccess || count < 2)) {
        WARN("needs 2 GPUs, " << count << " visible: not run");
        return;
    }
    Model model = synthetic(test::device_or_emu<std::string>("synthetic:llama-3.2-1b:bf16:layers=2:vocab=4096:seed=31",
                                                             "synthetic:tiny-llama:bf16:seed=31"));
    const auto prompt = test::device_or_emu<std::vector<int32_t>>({1, 791, 2864, 315, 3822, 374}, {1, 279, 304, 315, 238, 374});
    const uint32_t tp = 2, n_new = test::device_or_emu(8u, 3u);
    const Reference ref = cpu_reference(model, prompt, n_new);
    for (const Mode& m : {kResident, kStepwise}) {
        api::BackendOptions o = options(m.backend, 0);
        o.tp = tp;
        o.stepwise = m.stepwise;
        Schedule s = resolve_schedule(model, o);
        REQUIRE(s.target.n_sms == test::device_or_emu(current_device().sm_count, kEmuDefaultSms));  // a whole GPU per rank
        auto gpu = make_program(model, std::move(s), o);
        REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
        REQUIRE(count >= int(tp));
        check_teacher_forced(*gpu, ref, false, fmt::format("TP=2 on 2 GPUs {}", m.name));
    }
}

// A prompt in prefill chunks with one rank per GPU (each rank's chunk state on its own device, the T-row partials
// sent over the peer mappings): every position's logits against the CPU's TP = 1 token by token, a decode step from
// the prefilled caches, then a generation whose prompt is prefilled first and whose greedy tokens are the CPU's.
TEST_CASE("CUDA TP on separate GPUs: TP=2 prefill chunks match the CPU at TP=1", "[cuda][tp][gpus][prefill]") {
    int count = 0;
    if (!test::kEmulated && (cudaGetDeviceCount(&count) != cudaSuccess || count < 2)) {
        WARN("needs 2 GPUs, " << count << " visible: not run");
        return;
    }
    Model model = synthetic(test::device_or_emu<std::string>("synthetic:llama-3.2-1b:bf16:layers=2:vocab=4096:seed=32",
                                                             "synthetic:tiny-llama:bf16:seed=32"));
    const std::vector<int32_t> prompt = {1, 279, 304, 315, 238, 374, 12};
    const uint32_t tp = 2, chunk = 3, n_new = 3;  // 7 tokens: chunks of 3, 3 and 1
    const Reference ref = cpu_reference(model, prompt, n_new);
    api::BackendOptions o = options("cuda", 0);
    o.tp = tp;
    o.batch = chunk;
    o.all_logits = true;
    auto gpu = make_program(model, o);
    REQUIRE(gpu->prefill_tokens() == chunk);
    REQUIRE(gpu->schedule().tp_size == tp);
    REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
    REQUIRE(count >= int(tp));
    const size_t vocab = ref.logits[0].size();
    double worst = 0;
    for (size_t i = 0; i < prompt.size(); i += chunk) {
        const size_t n = std::min<size_t>(chunk, prompt.size() - i);
        gpu->prefill(std::span(prompt.data() + i, n), int32_t(i));
        const std::span<const float> rows = gpu->prefill_logits();
        REQUIRE(rows.size() == n * vocab);
        for (size_t j = 0; j < n; ++j)
            worst = std::max(worst, test::rel_l2(std::vector<float>(rows.begin() + std::ptrdiff_t(j * vocab),
                                                                    rows.begin() + std::ptrdiff_t((j + 1) * vocab)),
                                                 ref.logits[i + j]));
    }
    INFO("worst rel. L2 of the prefill logits vs CPU TP=1 " << worst);
    CHECK(worst < 1e-5);
    const size_t p = prompt.size();  // the next step reads both ranks' prefilled KV caches
    gpu->step(ref.inputs[p], int32_t(p), {}, {});
    CHECK(test::rel_l2(std::vector<float>(gpu->logits().begin(), gpu->logits().end()), ref.logits[p]) < 1e-5);
    gpu->reset();
    const std::vector<int32_t> cpu_tokens(ref.greedy.end() - n_new, ref.greedy.end());
    CHECK(gpu->run_generation(prompt, n_new, {}, {}, nullptr).tokens == cpu_tokens);
}

TEST_CASE("CUDA TP loopback: ranks that need more SMs than the device has are refused", "[cuda][tp]") {
    Model model = synthetic("synthetic:llama-3.2-1b:bf16:layers=2:vocab=4096:seed=31");
    const DeviceInfo device = current_device();
    const auto formats = padded_row_formats(tp_weight_formats(weight_formats(model), model_dims(model.config), 2),
                                            kDeviceRowAlign);
    Schedule s = compile_schedule(model.config, formats, target_device(device.sm_count, device.smem_optin),
                                  Policy::critical_path, 2);
    CudaProgramOptions co;
    co.ctx_len = 256;
    CHECK_THROWS_WITH(make_cuda_program(model, std::move(s), co),
                      Catch::Contains("2 rank(s) of") && Catch::Contains("--sms " + std::to_string(device.sm_count / 2)));
}

}  // namespace mk

// The CUDA backend's host logic (runtime/cuda/kernel_host) on the CPU, against a fake device: the
// device-side generation loop through the Engine equals the host loop, every wait on a stuck, deaf or
// dead kernel ends in an mk::Error within its bound, and one device runs one resident megakernel.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>

#include "models/error.hpp"
#include "models/synthetic.hpp"
#include "runtime/cuda/kernel_host.hpp"
#include "runtime/engine.hpp"
#include "scheduler/compile.hpp"
#include "tests/runtime/fake_device.hpp"
#include "tests/test_paths.hpp"

namespace mk {
namespace {

using test::FakeBehavior;
using test::FakeDevice;
using test::FakeKernelSpec;

constexpr uint32_t kCtx = 64;
constexpr uint32_t kWatchdogMs = 100;

const Model& tiny_model() {
    static const Model model = [] {
        const auto path = test::output_dir() / "kernel_host_tiny.gguf";
        write_synthetic_model(parse_synthetic_spec("synthetic:tiny-llama:f32:seed=18"), path);
        return load_model(path);
    }();
    return model;
}

std::unique_ptr<Program> cpu_program(const Model& model) {
    ProgramOptions o;
    o.n_threads = 1;
    o.ctx_len = kCtx;
    return make_cpu_program(model, compile_schedule(model.config, weight_formats(model), target_cpu(), Policy::critical_path, 1), o);
}

// A Program over the fake device, built as MegakernelProgram is over the real one: a KernelHost with one
// kernel link; the fake kernel runs the CPU backend's greedy step for each step it is given.
class FakeDeviceProgram final : public Program {
public:
    FakeDeviceProgram(FakeDevice& device, const Model& model, bool resident, FakeKernelSpec spec = {}, int ordinal = 0,
                      const std::string& name = "the fake resident kernel")
        : device_(device), spec_(spec), resident_(resident), cpu_(cpu_program(model)),
          host_(device, KernelHostOptions{resident, kWatchdogMs, name, {ordinal}}) {
        std::memset(static_cast<void*>(mailbox_.get()), 0, sizeof(Mailbox));
        stream_ = device.new_stream();
        host_.add({ordinal, 0, stream_, mailbox_.get(), tokens_.data(), tokens_.data(), kCtx, &cpu_->schedule()});
        if (resident) {
            device.launch(stream_, spec_, mailbox_.get(), nullptr, step_fn());
            host_.set_running(true);
        }
    }
    ~FakeDeviceProgram() override { host_.shutdown(); }

    int32_t step(int32_t token, int32_t pos, const SamplingParams&, std::span<const int32_t>) override {
        if (uint32_t(pos) != host_.next_pos()) fail("position {} does not follow {}", pos, host_.next_pos());
        const Command c = host_.command(1, std::span<const int32_t>(&token, 1));
        if (!resident_) {  // as MegakernelProgram::launch: the command as this kernel addresses its tokens
            Command launched = c;
            launched.tokens = tokens_.data();
            device_.launch(stream_, spec_, mailbox_.get(), &launched, step_fn());
        }
        host_.run(c);
        return host_.last_token();
    }
    bool runs_generation(const SamplingParams& p, size_t n_stop) const override {
        return resident_ && device_loop_samples(p) && n_stop <= kMaxStopTokens;
    }
    DeviceLoopResult run_generation(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stops,
                                    const std::function<bool(int32_t)>& on_token,
                                    const std::atomic<bool>* cancel) override {
        return host_.generate(prompt, n_new, stops, on_token, cancel);
    }
    std::span<const float> logits() const override { return cpu_->logits(); }
    void reset() override {
        host_.reset_position();
        cpu_->reset();
    }
    const Schedule& schedule() const override { return cpu_->schedule(); }
    uint32_t ctx_len() const override { return kCtx; }
    const char* backend_name() const override { return "fake-device"; }
    uint32_t n_threads() const override { return 1; }
    KernelHost& host() { return host_; }

private:
    test::FakeStep step_fn() {
        return [this](int32_t token, int32_t pos) { return cpu_->step(token, pos, SamplingParams{}, {}); };
    }

    FakeDevice& device_;
    FakeKernelSpec spec_;
    bool resident_;
    std::unique_ptr<Program> cpu_;
    std::unique_ptr<Mailbox> mailbox_ = std::make_unique<Mailbox>();
    std::vector<int32_t> tokens_ = std::vector<int32_t>(kCtx);
    void* stream_ = nullptr;
    KernelHost host_;
};

struct Run {
    GenerateStats stats;
    std::string text;
};
Run generate(const Model& model, std::unique_ptr<Program> program, const std::vector<int32_t>& prompt,
             GenerateOptions options, int stop_after_pieces = -1) {
    Engine engine(model, std::move(program));
    Run r;
    int pieces = 0;
    r.stats = engine.generate(prompt, options, [&](std::string_view piece) {
        r.text += piece;
        return ++pieces != stop_after_pieces;
    });
    return r;
}

const std::vector<int32_t> kPrompt = {5, 17, 3, 42, 9};

}  // namespace

TEST_CASE("Device loop: a whole generation is one command and equals the host loop", "[cpu][cuda_host]") {
    const Model& model = tiny_model();
    for (int32_t n : {1, 2, 7, 40, 100}) {
        INFO("n_predict " << n);
        GenerateOptions o;
        o.n_predict = n;
        o.stop_at_eog = false;
        const Run want = generate(model, cpu_program(model), kPrompt, o);
        FakeDevice device;
        const Run got = generate(model, std::make_unique<FakeDeviceProgram>(device, model, true), kPrompt, o);
        CHECK(device.commands_run() == 1);
        CHECK(got.stats.tokens == want.stats.tokens);
        CHECK(got.text == want.text);
        CHECK(got.stats.n_past == want.stats.n_past);
        CHECK(got.stats.n_eval_steps == want.stats.n_eval_steps);
        CHECK(got.stats.n_generated == want.stats.n_generated);
        CHECK(!got.stats.stopped_at_eog);
        CHECK(got.stats.eval_ms >= 0);
        // The stepwise kernel: one launch per token through the Engine's host loop, the same tokens.
        FakeDevice stepwise_device;
        const Run stepwise = generate(model, std::make_unique<FakeDeviceProgram>(stepwise_device, model, false), kPrompt, o);
        CHECK(stepwise_device.commands_run() == uint32_t(want.stats.n_past));
        CHECK(stepwise.stats.tokens == want.stats.tokens);
    }
}

TEST_CASE("Device loop: an end-of-generation token stops it on the device as on the host", "[cpu][cuda_host]") {
    (void)tiny_model();  // writes the file
    Model model = load_model(test::output_dir() / "kernel_host_tiny.gguf");
    GenerateOptions o;
    o.n_predict = 30;
    o.stop_at_eog = false;
    const Run free_run = generate(model, cpu_program(model), kPrompt, o);
    REQUIRE(free_run.stats.tokens.size() == 30);
    // Make the 6th generated token end generation.
    const int32_t eog = free_run.stats.tokens[5];
    TokenizerData data = model.tokenizer.data();
    data.eog_ids = {eog};
    model.tokenizer = Tokenizer(data);
    o.stop_at_eog = true;
    for (int32_t n : {30, 6}) {  // 6: the end-of-generation token is also the last one -n allows
        INFO("n_predict " << n);
        o.n_predict = n;
        const Run want = generate(model, cpu_program(model), kPrompt, o);
        FakeDevice device;
        const Run got = generate(model, std::make_unique<FakeDeviceProgram>(device, model, true), kPrompt, o);
        CHECK(want.stats.stopped_at_eog);
        CHECK(got.stats.stopped_at_eog);
        CHECK(got.stats.tokens == want.stats.tokens);
        CHECK(got.text == want.text);
        CHECK(got.stats.n_past == want.stats.n_past);
        CHECK(got.stats.n_eval_steps == want.stats.n_eval_steps);
    }
}

TEST_CASE("Device loop: cancellation and a listener that stops end the device's run early", "[cpu][cuda_host]") {
    const Model& model = tiny_model();
    GenerateOptions o;
    o.n_predict = 40;
    o.stop_at_eog = false;
    const Run full = generate(model, cpu_program(model), kPrompt, o);
    for (bool by_cancel : {true, false}) {
        INFO((by_cancel ? "cancel" : "listener"));
        FakeDevice device;
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;
        Engine engine(model, std::make_unique<FakeDeviceProgram>(device, model, true));
        int pieces = 0;
        const GenerateStats s = engine.generate(kPrompt, o, [&](std::string_view) {
            if (++pieces == 3 && by_cancel) cancel.store(true);
            return by_cancel || pieces < 3;
        });
        CHECK(s.cancelled == by_cancel);
        CHECK(s.n_generated < 40);
        CHECK(s.n_generated >= 3);
        CHECK(s.n_past == int32_t(kPrompt.size()) + s.n_eval_steps);
        // Every token run as an input is reported, so a Session can rebuild its cache's contents.
        CHECK(s.tokens.size() >= size_t(s.n_eval_steps));
        CHECK(std::equal(s.tokens.begin(), s.tokens.end(), full.stats.tokens.begin()));
        // The program carries on from where the device stopped.
        CHECK(engine.program().step(1, s.n_past, SamplingParams{}, {}) >= 0);
    }
}

TEST_CASE("Device loop: only greedy sampling runs on the device (the one switch)", "[cpu][cuda_host]") {
    SamplingParams p;
    CHECK(device_loop_samples(p));
    p.temperature = 0.8f;
    CHECK(!device_loop_samples(p));
    p.temperature = 0.0f;
    p.repeat_penalty = 1.1f;
    CHECK(!device_loop_samples(p));
    FakeDevice device;
    FakeDeviceProgram program(device, tiny_model(), true);
    CHECK(program.runs_generation(SamplingParams{}, kMaxStopTokens));
    CHECK(!program.runs_generation(SamplingParams{}, kMaxStopTokens + 1));
    FakeDeviceProgram stepwise(device, tiny_model(), false, {}, 1);
    CHECK(!stepwise.runs_generation(SamplingParams{}, 0));
}

TEST_CASE("Host waits: a stuck kernel is aborted and reported within the bound", "[cpu][cuda_host]") {
    for (bool resident : {true, false}) {
        INFO((resident ? "resident" : "stepwise"));
        FakeDevice device;
        FakeDeviceProgram program(device, tiny_model(), resident, {FakeBehavior::stuck});
        const uint64_t t0 = device.now_ns();
        CHECK_THROWS_WITH(program.step(1, 0, {}, {}),
                          Catch::Contains("aborted by the host") && Catch::Contains("CUDA watchdog"));
        const uint64_t waited = device.now_ns() - t0;
        CHECK(waited >= program.host().answer_limit_ns());
        CHECK(waited < program.host().answer_limit_ns() + program.host().abort_grace_ns());
        CHECK(program.host().broken());
        CHECK(!program.host().wedged());
    }
}

TEST_CASE("Host waits: a kernel that ignores the abort is reported, never waited for without end", "[cpu][cuda_host]") {
    // A wedged program's device stays claimed for the process's life: these use GPU ordinals of their own.
    for (bool resident : {true, false}) {
        INFO((resident ? "resident" : "stepwise"));
        const int ordinal = resident ? 90 : 91;
        FakeDevice device;
        auto program = std::make_unique<FakeDeviceProgram>(device, tiny_model(), resident,
                                                           FakeKernelSpec{FakeBehavior::ignores_abort}, ordinal);
        const uint64_t t0 = device.now_ns();
        CHECK_THROWS_WITH(program->step(1, 0, {}, {}), Catch::Contains("unusable until this process exits"));
        CHECK(device.now_ns() - t0 <= program->host().answer_limit_ns() + 2 * program->host().abort_grace_ns());
        CHECK(program->host().wedged());
        CHECK_THROWS_WITH(program->step(1, 0, {}, {}), Catch::Contains("unusable"));
        const uint64_t t1 = device.now_ns();
        CHECK(!program->host().shutdown());
        CHECK(device.now_ns() == t1);  // a wedged kernel is not waited for again
        program.reset();
        // Its kernel may still run: the device stays claimed after the program has gone.
        CHECK_THROWS_WITH(FakeDeviceProgram(device, tiny_model(), true, {}, ordinal),
                          Catch::Contains("GPU " + std::to_string(ordinal)));
    }
    // Ending a program whose kernel will not exit is bounded too.
    FakeDevice device;
    auto program = std::make_unique<FakeDeviceProgram>(device, tiny_model(), true,
                                                       FakeKernelSpec{FakeBehavior::ignores_abort}, 92);
    const uint64_t t0 = device.now_ns();
    CHECK(!program->host().shutdown());
    CHECK(device.now_ns() - t0 <= 2 * program->host().abort_grace_ns());
}

TEST_CASE("Host waits: a dead kernel and a watchdog fault become errors that name them", "[cpu][cuda_host]") {
    {
        FakeDevice device;
        FakeDeviceProgram program(device, tiny_model(), true, {FakeBehavior::dies});
        CHECK_THROWS_WITH(program.step(1, 0, {}, {}), Catch::Contains("illegal memory access"));
    }
    {
        FakeDevice device;
        FakeDeviceProgram program(device, tiny_model(), false, {FakeBehavior::dies});
        CHECK_THROWS_WITH(program.step(1, 0, {}, {}), Catch::Contains("illegal memory access"));
    }
    for (bool resident : {true, false}) {
        FakeDevice device;
        FakeDeviceProgram program(device, tiny_model(), resident, {FakeBehavior::answers, 0});
        CHECK_THROWS_WITH(program.step(1, 0, {}, {}), Catch::Contains("CUDA watchdog") &&
                                                          Catch::Contains("a wait exceeded the bound") &&
                                                          Catch::Contains("sm 0"));
    }
}

TEST_CASE("Host waits: wait_streams ends at its bound", "[cpu][cuda_host]") {
    FakeDevice device;
    Mailbox mailbox{};
    void* stream = device.new_stream();
    device.launch(stream, {FakeBehavior::stuck}, &mailbox, nullptr, {});
    const StreamRef s{0, stream};
    std::string error;
    const uint64_t t0 = device.now_ns();
    CHECK(wait_streams(device, std::span(&s, 1), 5000000, error) == WaitEnd::timed_out);
    CHECK(device.now_ns() - t0 >= 5000000);
    CHECK(device.now_ns() - t0 < 6000000);
    mailbox.host_abort = 1;
    CHECK(wait_streams(device, std::span(&s, 1), 5000000, error) == WaitEnd::idle);
}

TEST_CASE("One resident megakernel per device, alone: other programs are refused, naming it", "[cpu][cuda_host]") {
    FakeDevice device;
    auto first = std::make_unique<FakeDeviceProgram>(device, tiny_model(), true, FakeKernelSpec{}, 0, "resident #A");
    CHECK_THROWS_WITH(FakeDeviceProgram(device, tiny_model(), true, {}, 0, "resident #B"),
                      Catch::Contains("GPU 0 already runs resident #A"));
    // Nor may a stepwise program start there: its launches would never start, its frees never return.
    CHECK_THROWS_WITH(FakeDeviceProgram(device, tiny_model(), false, {}, 0, "stepwise #S"),
                      Catch::Contains("GPU 0 runs resident #A") && Catch::Contains("stepwise #S would never start"));
    // Another device is free, and so is this one once the first program has ended.
    CHECK_NOTHROW(FakeDeviceProgram(device, tiny_model(), true, {}, 1, "resident #C"));
    first.reset();
    {
        FakeDeviceProgram stepwise(device, tiny_model(), false, {}, 0, "stepwise #S");
        CHECK(stepwise.step(1, 0, {}, {}) >= 0);
        FakeDeviceProgram other(device, tiny_model(), false, {}, 0, "stepwise #T");  // shared claims coexist
        // While they live, a resident program is refused, naming them.
        CHECK_THROWS_WITH(FakeDeviceProgram(device, tiny_model(), true, {}, 0, "resident #B"),
                          Catch::Contains("GPU 0 has 2 other CUDA program(s) (stepwise #S, stepwise #T)"));
    }
    FakeDeviceProgram second(device, tiny_model(), true, {}, 0, "resident #B");
    CHECK(second.step(1, 0, {}, {}) >= 0);
}

}  // namespace mk

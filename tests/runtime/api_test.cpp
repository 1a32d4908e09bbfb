// The public C++ API (include/mk) end to end: greedy generation against the float64 oracle,
// seeded sampling, chat, token feeding vs generate, streaming back-pressure, cancel, schedules,
// errors at the boundary, and two sessions on two threads against a single-threaded run.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mk/mk.hpp"
#ifdef MK_HAVE_CUDA
#include "runtime/cuda/probe.hpp"
#endif
#include "tests/test_paths.hpp"

namespace {

using namespace mk::api;

std::string tiny_model_path() { return mk::test::synthetic_model_file("synthetic:tiny-llama:f32", "api_tiny_llama_f32.gguf"); }

GenerateOptions greedy(int32_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    o.stop_at_end = false;
    return o;
}

GenerateOptions seeded(int32_t n, uint64_t seed) {
    GenerateOptions o = greedy(n);
    o.sampling.temperature = 0.8f;
    o.sampling.seed = seed;
    return o;
}

}  // namespace

TEST_CASE("API: greedy generation equals the oracle's continuation on SmolLM2", "[cpu][model][oracle]") {
    std::ifstream in(mk::test::output_dir() / "oracle_smollm2_france.json");
    REQUIRE(in.good());
    const nlohmann::json oracle = nlohmann::json::parse(in);
    const auto prompt = oracle.at("tokens").get<std::vector<int32_t>>();
    const auto expected = oracle.at("generated").get<std::vector<int32_t>>();
    REQUIRE(expected.size() == 32);

    Model model = Model::load(mk::test::default_model_path().string());
    Session session = model.new_session();
    GenerateResult r = session.generate(std::span<const int32_t>(prompt), greedy(32));
    CHECK(r.tokens == expected);
    CHECK(r.n_prompt == int32_t(prompt.size()));
    CHECK(session.n_past() == int32_t(prompt.size()) + 31);  // the last token is sampled, never run
    CHECK(r.text == model.detokenize(expected));
}

TEST_CASE("API: a seed gives the same text, another seed another text", "[cpu][model]") {
    Model model = Model::load(mk::test::default_model_path().string());
    Session session = model.new_session();
    const std::string a = session.generate("Once upon a time", seeded(32, 7)).text;
    const std::string b = session.generate("Once upon a time", seeded(32, 7)).text;
    const std::string c = session.generate("Once upon a time", seeded(32, 8)).text;
    CHECK(!a.empty());
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("API: three tensor-parallel ranks sample the seeded text of one", "[cpu][model][tp]") {
    Model model = Model::load(mk::test::default_model_path().string());
    // Exact dots: q16 quantizes each rank's activations after their partial sums were added in another
    // order, so its ranks agree with TP 1 only within q16's own error (tp_test), too loosely for a draw.
    BackendOptions one_rank, tp3;
    one_rank.cpu_dots = tp3.cpu_dots = "exact";
    tp3.tp = 3;
    CHECK(model.compile(tp3).info().tp == 3);
    // Sampling reads every rank's logits slice, so this also checks the LM-head exchange.
    const std::string one = model.new_session(one_rank).generate("Once upon a time", seeded(24, 11)).text;
    const std::string three = model.new_session(tp3).generate("Once upon a time", seeded(24, 11)).text;
    CHECK(!one.empty());
    CHECK(three == one);
}

TEST_CASE("API: chat mode answers the capital of France with Paris", "[cpu][model]") {
    Model model = Model::load(mk::test::default_model_path().string());
    REQUIRE(model.info().has_chat_template);
    Session session = model.new_session();
    GenerateOptions o;
    o.max_tokens = 32;
    o.chat = true;
    std::string streamed;
    GenerateResult r = session.generate("What is the capital of France?", o, [&](std::string_view piece) {
        streamed += piece;
        return true;
    });
    INFO(r.text);
    CHECK(r.text.find("Paris") != std::string::npos);
    CHECK(streamed == r.text);
}

TEST_CASE("API: feeding tokens and sampling equals generate", "[cpu]") {
    Model model = Model::load(tiny_model_path());
    Session session = model.new_session();
    const std::vector<int32_t> prompt = model.tokenize("hello world, hello");
    const GenerateOptions o = seeded(12, 42);
    const GenerateResult r = session.generate(std::span<const int32_t>(prompt), o);
    REQUIRE(r.tokens.size() == 12);

    session.reset();
    CHECK(session.n_past() == 0);
    int32_t next = session.feed(prompt, o.sampling);
    CHECK(session.sample(o.sampling) == next);  // the host re-sample uses the backend's rule and key
    std::vector<int32_t> tokens{next};
    while (tokens.size() < 12) tokens.push_back(next = session.step(next, o.sampling));
    CHECK(tokens == r.tokens);
    CHECK(session.n_past() == int32_t(prompt.size()) + 11);
    CHECK(session.logits().size() == size_t(model.info().vocab_size));
}

TEST_CASE("API: prefill_chunk says how many prompt tokens a step runs", "[cpu]") {
    Model model = Model::load(tiny_model_path());
    BackendOptions o;
    o.batch = 16;
    CHECK(model.new_session(o).prefill_chunk() == 16);
    o.batch = 1;  // token by token: no prefill step
    CHECK(model.new_session(o).prefill_chunk() == 0);
    // Every token's logits from steps of 16 (a 40-token feed: 16, 16, 8) equal those of token-by-token steps, row by
    // row (varied tokens: a row written from the wrong token or into the wrong place differs).
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % (model.info().vocab_size - 1));
    o.all_logits = true;
    o.batch = 16;
    Session chunked = model.new_session(o);
    chunked.feed(prompt);
    o.batch = 1;
    Session stepped = model.new_session(o);
    stepped.feed(prompt);
    const std::span<const float> a = chunked.feed_logits(), b = stepped.feed_logits();
    REQUIRE(a.size() == prompt.size() * size_t(model.info().vocab_size));
    REQUIRE(b.size() == a.size());
    const size_t vocab = size_t(model.info().vocab_size);
    for (size_t j = 0; j < prompt.size(); ++j) {
        double diff = 0, norm = 0;
        for (size_t i = j * vocab; i < (j + 1) * vocab; ++i)
            diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), norm += double(b[i]) * b[i];
        INFO("token " << j);
        CHECK(std::sqrt(diff / norm) < 1e-3);  // q16 dots (README: logits within ~1e-3)
    }
    // A generation's passes over the weights: its prompt's prefill steps, then its decode steps.
    o.all_logits = false;
    o.batch = 16;
    Session session = model.new_session(o);
    GenerateOptions g = greedy(3);
    const GenerateResult r = session.generate(std::span<const int32_t>(prompt), g);
    CHECK(r.n_weight_passes == 3 + r.n_eval_steps);  // 16 + 16 + 8
    CHECK(r.n_eval_steps == 2);
}

TEST_CASE("API: streaming back-pressure, callback exceptions and cancel", "[cpu]") {
    Model model = Model::load(tiny_model_path());
    Session session = model.new_session();
    int pieces = 0;
    GenerateResult r = session.generate("abc", greedy(40), [&](std::string_view) { return ++pieces < 3; });
    CHECK(pieces == 3);
    CHECK(r.tokens.size() <= 4);  // stopped right after the third piece

    struct HostError {};
    CHECK_THROWS_AS(session.generate("abc", greedy(8), [](std::string_view) -> bool { throw HostError{}; }), HostError);

    r = session.generate("abc", greedy(40), [&](std::string_view) {
        session.cancel();  // as another thread would: stops after the current step
        return true;
    });
    CHECK(r.cancelled);
    CHECK(r.tokens.size() < 40);
    CHECK(session.generate("abc", greedy(5)).tokens.size() == 5);  // each generate starts uncancelled
}

TEST_CASE("API: schedules compile, save, load, inspect and run", "[cpu]") {
    Model model = Model::load(tiny_model_path());
    BackendOptions options;
    options.sms = 3;
    options.smem_bytes = 64 * 1024;
    Schedule s = model.compile(options);
    CHECK(s.info().n_sms == 3);
    CHECK(s.info().n_instructions > 0);
    CHECK(s.simulate().step_us > 0);
    CHECK(s.verify_summary().rfind("ok", 0) == 0);
    CHECK(nlohmann::json::parse(s.to_json()).is_object());

    const std::string path = (mk::test::output_dir() / ("api_schedule_" + std::to_string(::getpid()) + ".mks")).string();
    s.save(path);
    Schedule loaded = Schedule::load(path);
    std::filesystem::remove(path);
    CHECK(loaded.info().n_instructions == s.info().n_instructions);

    Session a = model.new_session(loaded);
    Session b = model.new_session();  // the CPU target's own schedule
    CHECK(a.schedule().info().n_sms == 3);
    CHECK(a.generate("abc", seeded(10, 3)).tokens == b.generate("abc", seeded(10, 3)).tokens);
}

TEST_CASE("API: bad input throws mk::Error", "[cpu]") {
    CHECK_THROWS_AS(Model::load("/nonexistent/model.gguf"), mk::Error);
    CHECK_THROWS_AS(Model::load("synthetic:no-such-shape:f32"), mk::Error);
    CHECK_THROWS_AS(Schedule::load("/nonexistent/x.mks"), mk::Error);
    Model model = Model::load(tiny_model_path());
    BackendOptions small;
    small.ctx_len = 8;
    Session session = model.new_session(small);
    CHECK_THROWS_AS(session.logits(), mk::Error);
    const int32_t bad_id = int32_t(model.info().vocab_size);
    CHECK_THROWS_AS(session.step(bad_id), mk::Error);
    CHECK_THROWS_AS(session.feed(std::vector<int32_t>(9, 1)), mk::Error);
    CHECK_THROWS_AS(session.generate(std::vector<int32_t>(8, 1), greedy(4)), mk::Error);
    SamplingOptions bad;
    bad.top_p = 2.0f;
    CHECK_THROWS_AS(session.step(1, bad), mk::Error);
    CHECK(session.n_past() == 0);  // nothing ran
    BackendOptions cuda;
    cuda.backend = "cuda";
#ifdef MK_HAVE_CUDA
    const bool gpu_usable = mk::cuda::probe_device().available;
#else
    const bool gpu_usable = false;  // a build without CUDA refuses the backend
#endif
    if (gpu_usable) {
        CHECK(model.new_session(cuda).backend() == "cuda");
    } else {
        CHECK_THROWS_AS(model.new_session(cuda), mk::Error);
    }
    BackendOptions bad_target;
    bad_target.target = "tpu";
    CHECK_THROWS_AS(model.new_session(bad_target), mk::Error);
}

TEST_CASE("API: two CPU sessions on two threads match a single-threaded run", "[cpu]") {
    Model model = Model::load(tiny_model_path());
    const std::vector<std::pair<std::string, GenerateOptions>> jobs = {{"hello", seeded(24, 1)},
                                                                       {"the quick brown fox", greedy(24)}};
    std::vector<std::vector<int32_t>> serial, parallel(jobs.size());
    std::vector<std::string> errors(jobs.size());
    {
        Session s = model.new_session();
        for (const auto& [prompt, o] : jobs) serial.push_back(s.generate(prompt, o).tokens);
    }
    for (int round = 0; round < 3; ++round) {
        std::vector<std::thread> threads;
        for (size_t i = 0; i < jobs.size(); ++i)
            threads.emplace_back([&, i] {
                try {
                    Session s = model.new_session();  // its own KV cache and workers
                    parallel[i] = s.generate(jobs[i].first, jobs[i].second).tokens;
                } catch (const mk::Error& e) {
                    errors[i] = e.what();
                }
            });
        for (std::thread& t : threads) t.join();
        CHECK(errors == std::vector<std::string>(jobs.size()));
        CHECK(parallel == serial);
    }
}

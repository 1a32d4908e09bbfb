// Session state through the public API: generate(append) continues the KV cache and equals a fresh
// session fed the whole sequence; truncate; save / load into a new session continues exactly as the
// original; states for another model, context or schedule, and damaged files, are refused by name.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "mk/mk.hpp"
#include "tests/test_paths.hpp"

namespace {

using namespace mk::api;
namespace fs = std::filesystem;

std::string tiny_llama() { return mk::test::synthetic_model_file("synthetic:tiny-llama:f32", "api_tiny_llama_f32.gguf"); }

std::string temp_file(const std::string& name) {
    return (mk::test::output_dir() / (name + "_" + std::to_string(::getpid()))).string();
}

GenerateOptions greedy(int32_t n, bool append) {
    GenerateOptions o;
    o.max_tokens = n;
    o.stop_at_end = false;
    o.append = append;
    return o;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const mk::Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("Session state: an appended turn runs only its tokens and equals a fresh session", "[cpu]") {
    Model model = Model::load(tiny_llama());
    Session chat = model.new_session();
    const GenerateResult first = chat.generate("hello world", greedy(6, false));
    const int32_t n_after_first = chat.n_past();
    CHECK(n_after_first == first.n_prompt + 5);  // the last generated token is pending, not run
    const std::vector<int32_t> turn = model.tokenize(" and again", false);
    const GenerateResult second = chat.generate(std::span<const int32_t>(turn), greedy(8, true));
    CHECK(second.n_prompt == int32_t(turn.size()));
    CHECK(second.n_past == n_after_first + int32_t(turn.size()) + 7);

    // The same token sequence in a fresh session, from position 0.
    std::vector<int32_t> sequence(chat.tokens().begin(), chat.tokens().begin() + n_after_first + int32_t(turn.size()));
    Session fresh = model.new_session();
    const GenerateResult again = fresh.generate(std::span<const int32_t>(sequence), greedy(8, false));
    CHECK(again.tokens == second.tokens);
    CHECK(fresh.tokens() == chat.tokens());
}

TEST_CASE("Session state: truncate keeps a prefix and the next tokens see only it", "[cpu]") {
    Model model = Model::load(tiny_llama());
    const std::vector<int32_t> a = model.tokenize("one two three"), b = model.tokenize(" four five", false),
                               c = model.tokenize(" six", false);
    Session s = model.new_session();
    s.feed(a);
    s.feed(b);
    s.truncate(int32_t(a.size()));
    CHECK(s.n_past() == int32_t(a.size()));
    CHECK_THROWS_AS(s.logits(), mk::Error);  // the last token run was truncated away
    s.feed(c);
    Session fresh = model.new_session();
    fresh.feed(a);
    fresh.feed(c);
    const auto x = s.logits(), y = fresh.logits();
    CHECK(std::equal(x.begin(), x.end(), y.begin()));  // the same steps on the same cache rows: bit-identical
    CHECK_THROWS_AS(s.truncate(s.n_past() + 1), mk::Error);
    CHECK_THROWS_AS(s.truncate(-1), mk::Error);
}

// Both KV-cache types: a bf16 cache is saved widened to fp32 and rounded back exactly on load.
TEST_CASE("Session state: save, load in a new session, continue as if never stopped", "[cpu]") {
    Model model = Model::load(tiny_llama());
    const std::string path = temp_file("state_roundtrip.mkstate");
    for (const char* kv_type : {"f32", "bf16"}) {
        INFO("KV cache " << kv_type);
        BackendOptions options;
        options.kv_type = kv_type;
        Session original = model.new_session(options);
        original.generate("the state of things", greedy(5, false));
        original.save(path);
        const GenerateResult went_on = original.generate(model.tokenize(" then", false), greedy(10, true));

        Session restored = model.new_session(options);
        restored.load(path);
        CHECK(restored.n_past() == went_on.n_past - int32_t(went_on.n_prompt) - 9);
        CHECK_THROWS_AS(restored.logits(), mk::Error);  // nothing has run in this session yet
        const GenerateResult resumed = restored.generate(model.tokenize(" then", false), greedy(10, true));
        CHECK(resumed.tokens == went_on.tokens);
        CHECK(restored.tokens() == original.tokens());
        fs::remove(path);
    }
}

TEST_CASE("Session state: a state for another model, context or schedule is refused by name", "[cpu]") {
    Model model = Model::load(tiny_llama());
    const std::string path = temp_file("state_refused.mkstate");
    Session s = model.new_session();
    s.feed(model.tokenize("abc"));
    s.save(path);

    // Same shape, other weights (another seed): its hash differs although its configuration does not.
    Model other = Model::load(mk::test::synthetic_model_file("synthetic:tiny-llama:f32:seed=9", "api_tiny_llama_f32_seed9.gguf"));
    Session wrong_model = other.new_session();
    CHECK_THAT(error_of([&] { wrong_model.load(path); }), Catch::Contains("saved for model") && Catch::Contains(path));
    CHECK(wrong_model.n_past() == 0);

    BackendOptions small;
    small.ctx_len = 64;
    Session wrong_ctx = model.new_session(small);
    CHECK_THAT(error_of([&] { wrong_ctx.load(path); }), Catch::Contains("context of") && Catch::Contains("use -c"));

    BackendOptions three;
    three.sms = 3;
    three.smem_bytes = 64 * 1024;
    Session wrong_schedule = model.new_session(three);
    CHECK_THAT(error_of([&] { wrong_schedule.load(path); }), Catch::Contains("another schedule"));

    // A cut file and a file that is not a state.
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string cut = temp_file("state_cut.mkstate");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() - 5));
    Session fresh = model.new_session();
    CHECK_THAT(error_of([&] { fresh.load(cut); }), Catch::Contains("expected"));
    std::ofstream(cut, std::ios::binary) << "not a state";
    CHECK_THAT(error_of([&] { fresh.load(cut); }), Catch::Contains("not an mk session state") || Catch::Contains("truncated"));
    CHECK_THAT(error_of([&] { fresh.load("/nonexistent/state"); }), Catch::Contains("cannot open"));
    fs::remove(path);
    fs::remove(cut);
}

TEST_CASE("Session state: vocabulary access", "[cpu]") {
    Model model = Model::load(tiny_llama());
    const SpecialTokens special = model.special_tokens();
    REQUIRE(!special.eog.empty());
    for (int32_t id : special.eog) CHECK(model.is_end_of_generation(id));
    const std::vector<int32_t> ids = model.tokenize("hello world", false);
    std::string pieces;
    for (int32_t id : ids) pieces += model.token_to_piece(id);
    CHECK(pieces == "hello world");
    CHECK_THROWS_AS(model.token_to_piece(int32_t(model.info().vocab_size)), mk::Error);
}

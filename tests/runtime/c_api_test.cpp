// The C API (mk/mk.h) against the C++ API it wraps: the same tokens, generations and samples; buffer sizing;
// save/load; every failure a status with this thread's message, null arguments refused, nothing thrown.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "mk/mk.h"
#include "mk/mk.hpp"
#include "tests/test_paths.hpp"

namespace {

namespace fs = std::filesystem;

std::string tiny_model() { return mk::test::synthetic_model_file("synthetic:tiny-llama:f32", "api_tiny_llama_f32.gguf"); }

struct Handles {
    mk_model* model = nullptr;
    mk_session* session = nullptr;
    ~Handles() {
        mk_session_free(session);
        mk_model_free(model);
    }
};

}  // namespace

TEST_CASE("C API: tokenize, generate with a callback and feed agree with the C++ API", "[cpu]") {
    Handles h;
    REQUIRE(mk_model_load(tiny_model().c_str(), &h.model) == MK_OK);
    mk::api::Model cpp = mk::api::Model::load(tiny_model());
    CHECK(mk_model_vocab_size(h.model) == cpp.info().vocab_size);

    const char* text = "hello world, hello";
    size_t needed = 0;
    CHECK(mk_tokenize(h.model, text, 1, nullptr, 0, &needed) == MK_INVALID_ARGUMENT);  // sizing call
    std::vector<int32_t> ids(needed);
    REQUIRE(mk_tokenize(h.model, text, 1, ids.data(), ids.size(), &needed) == MK_OK);
    CHECK(ids == cpp.tokenize(text));
    std::string pieces;
    for (int32_t id : ids) {
        char buf[64];
        size_t n = 0;
        REQUIRE(mk_token_to_piece(h.model, id, buf, sizeof buf, &n) == MK_OK);
        pieces.append(buf, n);
    }
    CHECK(pieces == text);

    mk_session_options so;
    mk_session_options_default(&so);
    so.backend = "cpu";
    REQUIRE(mk_session_new(h.model, &so, &h.session) == MK_OK);
    mk_generate_options go;
    mk_generate_options_default(&go);
    go.max_tokens = 10;
    go.stop_at_end = 0;
    go.sampling.temperature = 0.7f;
    go.sampling.seed = 5;
    std::string streamed;
    mk_generate_result r;
    auto collect = [](const char* piece, size_t n, void* user) {
        static_cast<std::string*>(user)->append(piece, n);
        return 1;
    };
    REQUIRE(mk_session_generate(h.session, ids.data(), ids.size(), &go, collect, &streamed, &r) == MK_OK);
    CHECK(r.n_prompt == int32_t(ids.size()));
    CHECK(r.n_generated == 10);
    CHECK(mk_session_n_past(h.session) == r.n_past);

    mk::api::Session s = cpp.new_session();
    mk::api::GenerateOptions cgo;
    cgo.max_tokens = 10;
    cgo.stop_at_end = false;
    cgo.sampling.temperature = 0.7f;
    cgo.sampling.seed = 5;
    CHECK(s.generate(std::span<const int32_t>(ids), cgo).text == streamed);

    // A callback returning 0 stops the generation there.
    auto stop = [](const char*, size_t, void* user) { return ++*static_cast<int*>(user) < 2 ? 1 : 0; };
    int calls = 0;
    REQUIRE(mk_session_generate(h.session, ids.data(), ids.size(), &go, stop, &calls, &r) == MK_OK);
    CHECK(calls == 2);
    CHECK(r.n_generated < 10);

    // feed + sample + logits against the C++ session.
    mk_sampling greedy;
    mk_sampling_default(&greedy);
    REQUIRE(mk_session_reset(h.session) == MK_OK);
    int32_t next = -1;
    REQUIRE(mk_session_feed(h.session, ids.data(), ids.size(), &greedy, &next) == MK_OK);
    s.reset();
    CHECK(next == s.feed(ids));
    const float* logits = nullptr;
    size_t n_logits = 0;
    REQUIRE(mk_session_logits(h.session, &logits, &n_logits) == MK_OK);
    REQUIRE(n_logits == s.logits().size());
    CHECK(std::equal(logits, logits + n_logits, s.logits().begin()));
    int32_t sampled = -1;
    REQUIRE(mk_session_sample(h.session, &greedy, &sampled) == MK_OK);
    CHECK(sampled == next);
    REQUIRE(mk_session_truncate(h.session, 2) == MK_OK);
    CHECK(mk_session_n_past(h.session) == 2);
}

TEST_CASE("C API: save and load, and failures as statuses with messages", "[cpu]") {
    Handles h;
    CHECK(mk_model_load("/nonexistent/model.gguf", &h.model) == MK_ERROR);
    CHECK(h.model == nullptr);
    CHECK(std::string(mk_last_error()).find("/nonexistent/model.gguf") != std::string::npos);
    CHECK(mk_model_load(nullptr, nullptr) == MK_INVALID_ARGUMENT);

    REQUIRE(mk_model_load(tiny_model().c_str(), &h.model) == MK_OK);
    REQUIRE(mk_session_new(h.model, nullptr, &h.session) == MK_OK);
    const float* logits = nullptr;
    size_t n = 0;
    CHECK(mk_session_logits(h.session, &logits, &n) == MK_ERROR);  // nothing has run
    const int32_t bad = mk_model_vocab_size(h.model);
    CHECK(mk_session_feed(h.session, &bad, 1, nullptr, nullptr) == MK_ERROR);
    CHECK(std::string(mk_last_error()).find("outside the vocabulary") != std::string::npos);
    CHECK(mk_session_load(h.session, "/nonexistent/state") == MK_ERROR);
    CHECK(mk_session_feed(nullptr, &bad, 1, nullptr, nullptr) == MK_INVALID_ARGUMENT);

    const int32_t prompt[] = {5, 6, 7, 8};
    REQUIRE(mk_session_feed(h.session, prompt, 4, nullptr, nullptr) == MK_OK);
    const std::string path = (mk::test::output_dir() / ("c_api_state_" + std::to_string(::getpid()))).string();
    REQUIRE(mk_session_save(h.session, path.c_str()) == MK_OK);
    mk_session* other = nullptr;
    REQUIRE(mk_session_new(h.model, nullptr, &other) == MK_OK);
    REQUIRE(mk_session_load(other, path.c_str()) == MK_OK);
    CHECK(mk_session_n_past(other) == 4);
    int32_t a = -1, b = -1;
    const int32_t next = 9;
    REQUIRE(mk_session_feed(h.session, &next, 1, nullptr, &a) == MK_OK);
    REQUIRE(mk_session_feed(other, &next, 1, nullptr, &b) == MK_OK);
    CHECK(a == b);
    mk_session_free(other);

    mk_session_options small;
    mk_session_options_default(&small);
    small.ctx_len = 32;
    mk_session* wrong = nullptr;
    REQUIRE(mk_session_new(h.model, &small, &wrong) == MK_OK);
    CHECK(mk_session_load(wrong, path.c_str()) == MK_ERROR);
    CHECK(std::string(mk_last_error()).find("saved with a context of") != std::string::npos);
    mk_session_free(wrong);
    fs::remove(path);
}

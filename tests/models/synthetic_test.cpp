// Synthetic models: spec strings, shapes, the generated tokenizer, and write -> load round trips of every
// shape × dtype × format (config and every tensor's bytes as written).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "models/error.hpp"
#include "models/model.hpp"
#include "models/quant.hpp"
#include "models/synthetic.hpp"
#include "tests/test_paths.hpp"

using Catch::Matchers::Contains;

namespace {

std::filesystem::path out_path(const std::string& name) {
    auto dir = mk::test::output_dir() / "synthetic_test";
    std::filesystem::create_directories(dir);
    std::filesystem::remove_all(dir / name);
    return dir / name;
}

std::string file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Writes `spec`, loads it back and checks the config and every weight against what the writer drew.
void check_round_trip(const std::string& spec_text) {
    INFO(spec_text);
    mk::SyntheticSpec spec = mk::parse_synthetic_spec(spec_text);
    std::string name = spec_text.substr(10);
    for (char& c : name)
        if (c == ':' || c == '=') c = '_';
    auto path = out_path(name + (spec.format == mk::ModelFormat::gguf ? ".gguf" : ""));
    mk::write_synthetic_model(spec, path);
    mk::Model m = mk::load_model(path);

    mk::ModelConfig want = mk::synthetic_config(spec);
    INFO(mk::describe(m.config));
    CHECK(m.config.hash() == want.hash());
    CHECK(m.config.name == want.name);
    CHECK(m.config.rope_freq_factors == want.rope_freq_factors);
    CHECK(m.format == spec.format);
    CHECK(m.tokenizer.vocab_size() == size_t(want.vocab_size));
    CHECK(m.chat_template == mk::synthetic_chat_template());
    CHECK(m.tokenizer.is_eog(2));  // <|im_end|>
    CHECK_FALSE(m.tokenizer.is_eog(1));

    for (const mk::WeightSpec& w : mk::weight_specs(want)) {
        const mk::TensorView& t = w.layer >= 0 ? m.layers[size_t(w.layer)].*w.layer_field : m.*w.model_field;
        INFO(w.gguf_name);
        bool vector = w.kind == mk::WeightKind::norm || w.kind == mk::WeightKind::bias;
        mk::DType dtype = vector ? mk::DType::F32 : mk::synthetic_storage_dtype(spec.dtype, w.shape.back());
        REQUIRE(t.dtype == dtype);
        REQUIRE(t.shape == w.shape);
        std::vector<float> values = mk::synthetic_weight_values(w, spec.seed);  // (n_elements) f32
        const int64_t row = w.shape.back();
        const size_t stride = mk::row_bytes(dtype, row);
        std::vector<uint8_t> expected(stride * values.size() / size_t(row));  // rows in dtype's format
        for (size_t r = 0; r < values.size() / size_t(row); ++r)
            mk::quantize_row(dtype, values.data() + r * size_t(row), expected.data() + r * stride, row);
        REQUIRE(t.n_bytes == expected.size());
        CHECK(std::memcmp(t.data, expected.data(), expected.size()) == 0);
    }
}

}  // namespace

TEST_CASE("synthetic spec strings parse, print canonically and reject bad parts", "[cpu]") {
    mk::SyntheticSpec a = mk::parse_synthetic_spec("synthetic:tiny-llama:q4_1");
    CHECK(a.shape == "tiny-llama");
    CHECK(a.dtype == mk::DType::Q4_1);
    CHECK(a.format == mk::ModelFormat::gguf);
    CHECK(a.seed == 0);
    CHECK_FALSE(a.n_layers);

    mk::SyntheticSpec b = mk::parse_synthetic_spec("synthetic:smollm2-135m:Q4_K:layers=2:vocab=1000:seed=42:format=gguf");
    CHECK(b.dtype == mk::DType::Q4_K);
    CHECK(*b.n_layers == 2);
    CHECK(*b.vocab_size == 1000);
    CHECK(b.seed == 42);
    CHECK(mk::to_string(b) == "synthetic:smollm2-135m:q4_k:layers=2:vocab=1000:seed=42:format=gguf");
    CHECK(mk::to_string(mk::parse_synthetic_spec(mk::to_string(b))) == mk::to_string(b));

    mk::SyntheticSpec c = mk::parse_synthetic_spec("synthetic:tiny-qwen3:bf16:format=safetensors:d_model=128:ff=512");
    CHECK(c.format == mk::ModelFormat::safetensors);
    CHECK(mk::synthetic_config(c).d_model == 128);
    CHECK(mk::synthetic_config(c).d_ff == 512);
    CHECK(mk::is_synthetic_spec("synthetic:x"));
    CHECK_FALSE(mk::is_synthetic_spec("model.gguf"));

    auto error_of = [](const std::string& s) {
        try {
            mk::parse_synthetic_spec(s);
        } catch (const mk::Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK_THAT(error_of("synthetic:nope:f32"), Contains("nope") && Contains("tiny-llama") && Contains("smollm2-135m"));
    CHECK_THAT(error_of("synthetic:tiny-llama:q5_0"), Contains("q5_0"));
    CHECK_THAT(error_of("synthetic:tiny-llama"), Contains("SHAPE:DTYPE"));
    CHECK_THAT(error_of("tiny-llama:f32"), Contains("synthetic:"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:layers=x"), Contains("layers") && Contains("'x'"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:layers=0"), Contains("layers=0"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:color=red"), Contains("color"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:format=onnx"), Contains("onnx"));
    CHECK_THAT(error_of("synthetic:tiny-llama:q4_0:format=safetensors"), Contains("safetensors"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:heads=3"), Contains("n_kv_heads"));
    CHECK_THAT(error_of("synthetic:tiny-llama:f32:vocab=100"), Contains("259"));
}

TEST_CASE("synthetic shapes have the real models' dimensions", "[cpu]") {
    mk::ModelConfig s = mk::synthetic_config("smollm2-135m");
    CHECK(s.n_layers == 30);
    CHECK(s.d_model == 576);
    CHECK(s.n_heads == 9);
    CHECK(s.n_kv_heads == 3);
    CHECK(s.head_dim == 64);
    CHECK(s.d_ff == 1536);
    CHECK(s.vocab_size == 49152);
    CHECK(s.tied_embeddings);

    mk::ModelConfig l = mk::synthetic_config("llama-3.2-1b");
    CHECK(l.rope_freq_factors == mk::llama3_rope_freq_factors(500000.0f, 64, 32.0f, 1.0f, 4.0f, 8192));
    CHECK(l.q_dim() == 2048);
    CHECK(mk::synthetic_config("qwen2-0.5b").qkv_bias);
    mk::ModelConfig q3 = mk::synthetic_config("qwen3-0.6b");
    CHECK(q3.qk_norm);
    CHECK(q3.head_dim == 128);
    CHECK(q3.q_dim() == 2048);
    for (const char* name : {"llama-3.1-8b", "llama-3.1-70b"}) {
        mk::ModelConfig b = mk::synthetic_config(name);
        const bool big = name == std::string("llama-3.1-70b");
        CHECK(b.n_layers == (big ? 80 : 32));
        CHECK(b.d_model == (big ? 8192 : 4096));
        CHECK(b.n_heads == (big ? 64 : 32));
        CHECK(b.n_kv_heads == 8);
        CHECK(b.head_dim == 128);
        CHECK(b.d_ff == (big ? 28672 : 14336));
        CHECK(b.vocab_size == 128256);
        CHECK_FALSE(b.tied_embeddings);
        CHECK(b.rope_freq_factors == mk::llama3_rope_freq_factors(500000.0f, 128, 8.0f, 1.0f, 4.0f, 8192));
    }
    CHECK(mk::synthetic_shapes().size() == 10);
    CHECK_THROWS_WITH(mk::synthetic_config("gpt-5"), Contains("gpt-5"));

    CHECK(mk::synthetic_storage_dtype(mk::DType::Q4_K, 576) == mk::DType::Q4_1);
    CHECK(mk::synthetic_storage_dtype(mk::DType::Q4_K, 1536) == mk::DType::Q4_K);
    CHECK(mk::synthetic_storage_dtype(mk::DType::Q6_K, 64) == mk::DType::Q8_0);
    CHECK(mk::synthetic_storage_dtype(mk::DType::Q4_0, 48) == mk::DType::F16);
}

TEST_CASE("synthetic weights are seeded, non-zero and O(1)", "[cpu]") {
    mk::ModelConfig c = mk::synthetic_config("tiny-qwen2");
    for (const mk::WeightSpec& w : mk::weight_specs(c)) {
        std::vector<float> v = mk::synthetic_weight_values(w, 9);
        CHECK(v == mk::synthetic_weight_values(w, 9));
        CHECK(v != mk::synthetic_weight_values(w, 10));
        float lo = 1e9f, hi = -1e9f;
        for (float x : v) {
            REQUIRE(x != 0.0f);
            lo = std::min(lo, x), hi = std::max(hi, x);
        }
        INFO(w.gguf_name);
        CHECK(hi <= 1.2f);
        CHECK(lo >= -1.0f);
        if (w.kind == mk::WeightKind::norm) CHECK(lo >= 0.8f);
    }
}

TEST_CASE("the synthetic tokenizer is a valid byte-level BPE of exactly vocab_size tokens", "[cpu]") {
    for (int64_t vocab : {259, 512, 5000}) {
        mk::TokenizerData d = mk::synthetic_tokenizer(vocab);
        INFO(vocab);
        REQUIRE(d.tokens.size() == size_t(vocab));
        REQUIRE(d.types.size() == size_t(vocab));
        CHECK(d.merges.size() == size_t(vocab - 259));
        std::set<std::string> unique(d.tokens.begin(), d.tokens.end());
        CHECK(unique.size() == d.tokens.size());
        CHECK(d.tokens[1] == "<|im_start|>");
        CHECK(d.types[2] == mk::TokenType::control);
        for (const std::string& m : d.merges) {
            size_t sp = m.find(' ');
            REQUIRE(sp != std::string::npos);
            CHECK(unique.count(m.substr(0, sp)));
            CHECK(unique.count(m.substr(sp + 1)));
            CHECK(unique.count(m.substr(0, sp) + m.substr(sp + 1)));
        }
        CHECK(d.tokens == mk::synthetic_tokenizer(vocab).tokens);
    }
    mk::Tokenizer tok(mk::synthetic_tokenizer(512));
    std::string text = "<|im_start|>user\nThe capital of France is Paris. Héllo 123!<|im_end|>";
    std::vector<int32_t> ids = tok.encode(text);
    CHECK(ids.front() == 1);
    CHECK(ids.back() == 2);
    CHECK(ids.size() < 40);  // merges learned from the built-in text apply
    std::vector<int32_t> body(ids.begin() + 1, ids.end() - 1);
    CHECK(tok.decode(body) == "user\nThe capital of France is Paris. Héllo 123!");
}

namespace {

// Every dtype as GGUF, every float dtype as safetensors.
void check_shape_round_trips(const char* shape, const char* overrides = "") {
    for (const char* dtype : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k"})
        check_round_trip(fmt::format("synthetic:{}:{}:seed=1{}", shape, dtype, overrides));
    for (const char* dtype : {"f32", "f16", "bf16"})
        check_round_trip(fmt::format("synthetic:{}:{}:seed=2:format=safetensors{}", shape, dtype, overrides));
}

}  // namespace

TEST_CASE("tiny-llama round-trips in every dtype and format", "[cpu]") { check_shape_round_trips("tiny-llama"); }
TEST_CASE("tiny-llama3 round-trips in every dtype and format", "[cpu]") { check_shape_round_trips("tiny-llama3"); }
TEST_CASE("tiny-qwen2 round-trips in every dtype and format", "[cpu]") { check_shape_round_trips("tiny-qwen2"); }
TEST_CASE("tiny-qwen3 round-trips in every dtype and format", "[cpu]") { check_shape_round_trips("tiny-qwen3"); }

TEST_CASE("K-quants on every matrix once rows are 256 wide", "[cpu]") {
    check_round_trip("synthetic:tiny-llama:q4_k:d_model=256:heads=4:kv_heads=2:head_dim=64:layers=1");
    check_round_trip("synthetic:tiny-qwen3:q6_k:d_model=256:layers=1:vocab=300");
}

TEST_CASE("real synthetic shapes round-trip (one layer, small vocab)", "[cpu]") {
    check_round_trip("synthetic:smollm2-135m:q4_1:layers=1:vocab=300");
    check_round_trip("synthetic:smollm2-135m:bf16:layers=1:vocab=300:format=safetensors");
}

// One layer and a small vocabulary keep these to the shapes' matrix sizes (llama-3.2-1b: ~60 M values).
TEST_CASE("smollm2-135m round-trips in every dtype and format", "[cpu][slow]") {
    check_shape_round_trips("smollm2-135m", ":layers=1:vocab=1024");
}
TEST_CASE("llama-3.2-1b round-trips in every dtype and format", "[cpu][slow]") {
    check_shape_round_trips("llama-3.2-1b", ":layers=1:vocab=1024");
}
TEST_CASE("qwen2-0.5b round-trips in every dtype and format", "[cpu][slow]") {
    check_shape_round_trips("qwen2-0.5b", ":layers=1:vocab=1024");
}
TEST_CASE("qwen3-0.6b round-trips in every dtype and format", "[cpu][slow]") {
    check_shape_round_trips("qwen3-0.6b", ":layers=1:vocab=1024");
}

TEST_CASE("synthetic files are deterministic", "[cpu]") {
    auto a = out_path("det-a.gguf"), b = out_path("det-b.gguf"), c = out_path("det-c.gguf");
    mk::write_synthetic_model(mk::parse_synthetic_spec("synthetic:tiny-qwen3:q4_1:seed=4"), a);
    mk::write_synthetic_model(mk::parse_synthetic_spec("synthetic:tiny-qwen3:q4_1:seed=4"), b);
    mk::write_synthetic_model(mk::parse_synthetic_spec("synthetic:tiny-qwen3:q4_1:seed=5"), c);
    CHECK(file_bytes(a) == file_bytes(b));
    CHECK(file_bytes(a) != file_bytes(c));
}

TEST_CASE("writing the full smollm2-135m shape", "[cpu][slow]") {
    auto path = out_path("smollm2-full.gguf");
    auto start = std::chrono::steady_clock::now();
    mk::write_synthetic_model(mk::parse_synthetic_spec("synthetic:smollm2-135m:q4_1"), path);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN("synthetic:smollm2-135m:q4_1 written in " << seconds << " s");
    mk::Model m = mk::load_model(path);
    CHECK(m.layers.size() == 30);
    CHECK(m.tokenizer.vocab_size() == 49152);
    CHECK(m.per_token_weight_bytes > 80'000'000);
}

// ModelConfig: the real SmolLM2 GGUF, HF config.json parsing, llama3 rope factors, validation errors
// naming the file and key, and the stability of hash().
#include <catch2/catch.hpp>
#include <filesystem>

#include "models/config.hpp"
#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/gguf_writer.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

using Catch::Matchers::Contains;

namespace {

// SmolLM2-135M's config.json, as published.
const char* kSmolLm2Json = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_hidden_layers": 30,
  "num_key_value_heads": 3, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000,
  "rope_scaling": null, "tie_word_embeddings": true, "vocab_size": 49152, "attention_bias": false
})";

// Llama-3.2-1B's config.json (abridged to what mk reads).
const char* kLlama32Json = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
  "num_hidden_layers": 16, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true, "vocab_size": 128256,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
})";

const char* kQwen3Json = R"({
  "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
  "num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true, "vocab_size": 151936
})";

std::string replace(std::string s, const std::string& from, const std::string& to) {
    size_t pos = s.find(from);
    REQUIRE(pos != std::string::npos);
    return s.replace(pos, from.size(), to);
}

mk::GgufWriter llama_gguf_metadata() {
    mk::GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_string("general.name", "test");
    w.add_u32("llama.block_count", 2);
    w.add_u32("llama.context_length", 256);
    w.add_u32("llama.embedding_length", 64);
    w.add_u32("llama.feed_forward_length", 128);
    w.add_u32("llama.attention.head_count", 4);
    w.add_u32("llama.attention.head_count_kv", 2);
    w.add_f32("llama.rope.freq_base", 10000.0f);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32("llama.vocab_size", 300);
    return w;
}

mk::ModelConfig config_of(const mk::GgufWriter& w) {
    std::vector<uint8_t> bytes = w.to_bytes();
    return mk::config_from_gguf(mk::GgufFile::parse(bytes.data(), bytes.size(), "test.gguf"));
}

}  // namespace

TEST_CASE("config from the real SmolLM2 GGUF", "[cpu][model]") {
    auto path = mk::test::default_model_path();
    MK_SKIP_IF_MISSING(path, "./tools/setup.sh");
    mk::ModelConfig c = mk::config_from_gguf(mk::GgufFile::open(path));
    INFO(mk::describe(c));
    CHECK(c.arch == mk::Arch::llama);
    CHECK(c.n_layers == 30);
    CHECK(c.d_model == 576);
    CHECK(c.n_heads == 9);
    CHECK(c.n_kv_heads == 3);
    CHECK(c.head_dim == 64);
    CHECK(c.d_ff == 1536);
    CHECK(c.vocab_size == 49152);
    CHECK(c.context_length == 8192);
    CHECK(c.rope_base == 100000.0f);
    CHECK(c.rope_freq_factors.empty());
    CHECK(c.norm_eps == Approx(1e-5f));
    CHECK(c.tied_embeddings);
    CHECK_FALSE(c.qkv_bias);
    CHECK_FALSE(c.qk_norm);

    // The same model described by its HF config.json has the same hash.
    mk::ModelConfig hf = mk::config_from_hf_json(kSmolLm2Json, "SmolLM2/config.json");
    CHECK(hf.hash() == c.hash());
}

TEST_CASE("llama3 rope factors match hand-computed values", "[cpu]") {
    // base 500000, head_dim 64, factor 32, low 1, high 4, original context 8192 (Llama 3.2):
    // pair i has wavelength 2π·500000^(i/32); below 2048 kept, above 8192 divided by 32, else smoothed.
    std::vector<float> f = mk::llama3_rope_freq_factors(500000.0f, 64, 32.0f, 1.0f, 4.0f, 8192);
    REQUIRE(f.size() == 32);
    CHECK(f[0] == 1.0f);                          // wavelength 6.28
    CHECK(f[14] == 1.0f);                         // 1956.5
    CHECK(f[15] == Approx(1.6513292).epsilon(1e-5));  // 2948.3: s = (8192/2948.3 − 1)/3
    CHECK(f[16] == Approx(3.2922621).epsilon(1e-5));  // 4442.9
    CHECK(f[17] == Approx(9.6667290).epsilon(1e-5));  // 6695.1
    CHECK(f[20] == 32.0f);                        // 22910.6
    CHECK(f[31] == 32.0f);

    mk::ModelConfig c = mk::config_from_hf_json(kLlama32Json, "Llama-3.2-1B/config.json");
    CHECK(c.rope_freq_factors == f);
    CHECK(c.head_dim == 64);
    CHECK(c.n_kv_heads == 8);
    CHECK(c.context_length == 131072);
    CHECK_THAT(c.rope_scaling, Contains("llama3"));
    CHECK(c.name == "Llama-3.2-1B");
}

TEST_CASE("HF config.json: Qwen3 head_dim, Qwen2 biases, rope_parameters", "[cpu]") {
    mk::ModelConfig q3 = mk::config_from_hf_json(kQwen3Json, "q/config.json");
    CHECK(q3.arch == mk::Arch::qwen3);
    CHECK(q3.head_dim == 128);
    CHECK(q3.q_dim() == 2048);
    CHECK(q3.qk_norm);
    CHECK_FALSE(q3.qkv_bias);
    CHECK(q3.norm_eps == Approx(1e-6f));
    CHECK(q3.rope_base == 1000000.0f);

    std::string q2 = replace(kQwen3Json, "Qwen3ForCausalLM", "Qwen2ForCausalLM");
    mk::ModelConfig c2 = mk::config_from_hf_json(q2, "q/config.json");
    CHECK(c2.qkv_bias);
    CHECK_FALSE(c2.qk_norm);

    // transformers 5 nests rope_theta and the scaling in rope_parameters.
    std::string nested = replace(kLlama32Json, R"("rope_theta": 500000.0,)", "");
    nested = replace(nested, R"("rope_scaling": {)", R"("rope_parameters": {"rope_theta": 500000.0, )");
    mk::ModelConfig n = mk::config_from_hf_json(nested, "l/config.json");
    CHECK(n.hash() == mk::config_from_hf_json(kLlama32Json, "l/config.json").hash());
}

TEST_CASE("HF config.json errors name the file and the key", "[cpu]") {
    auto error_of = [](const std::string& json) {
        try {
            mk::config_from_hf_json(json, "smol/config.json");
        } catch (const mk::Error& e) {
            return std::string(e.what());
        }
        FAIL("no error");
        return std::string();
    };
    std::string missing = error_of(replace(kSmolLm2Json, R"("hidden_size": 576,)", ""));
    CHECK_THAT(missing, Contains("smol/config.json") && Contains("hidden_size"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("num_key_value_heads": 3)", R"("num_key_value_heads": 4)")),
               Contains("smol/config.json") && Contains("num_key_value_heads"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("num_hidden_layers": 30)", R"("num_hidden_layers": 0)")),
               Contains("num_hidden_layers"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("num_hidden_layers": 30)", R"("num_hidden_layers": "30")")),
               Contains("num_hidden_layers") && Contains("integer"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, "LlamaForCausalLM", "MistralForCausalLM")),
               Contains("architectures") && Contains("MistralForCausalLM"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("hidden_act": "silu")", R"("hidden_act": "gelu")")),
               Contains("hidden_act"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("vocab_size": 49152)", R"("vocab_size": 1e12)")),
               Contains("vocab_size"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("rope_scaling": null)", R"("rope_scaling": {"rope_type": "yarn"})")),
               Contains("rope_type") && Contains("yarn"));
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("rope_scaling": null)", R"("rope_scaling": {"rope_type": "llama3"})")),
               Contains("rope_scaling.factor"));
    CHECK_THAT(error_of("{not json"), Contains("smol/config.json"));
    // head_dim 63 (odd): RoPE needs pairs.
    CHECK_THAT(error_of(replace(kSmolLm2Json, R"("hidden_size": 576,)", R"("hidden_size": 576, "head_dim": 63,)")),
               Contains("head_dim"));
}

TEST_CASE("config from GGUF metadata: defaults and errors naming the key", "[cpu]") {
    mk::ModelConfig c = config_of(llama_gguf_metadata());
    CHECK(c.head_dim == 16);  // no key_length: d_model / n_heads
    CHECK(c.vocab_size == 300);
    CHECK(c.tied_embeddings);  // no output.weight
    CHECK(c.name == "test");

    mk::GgufWriter no_ff;
    for (const char* key : {"general.architecture"}) no_ff.add_string(key, "llama");
    no_ff.add_u32("llama.block_count", 2);
    no_ff.add_u32("llama.embedding_length", 64);
    CHECK_THROWS_WITH(config_of(no_ff), Contains("test.gguf") && Contains("llama.feed_forward_length"));

    mk::GgufWriter bad_heads = llama_gguf_metadata();
    bad_heads.add_u32("llama.attention.key_length", 15);
    CHECK_THROWS_WITH(config_of(bad_heads), Contains("test.gguf") && Contains("llama.attention.key_length"));

    mk::GgufWriter partial = llama_gguf_metadata();
    partial.add_u32("llama.rope.dimension_count", 8);
    CHECK_THROWS_WITH(config_of(partial), Contains("llama.rope.dimension_count"));

    mk::GgufWriter arch;
    arch.add_string("general.architecture", "gpt2");
    CHECK_THROWS_WITH(config_of(arch), Contains("test.gguf") && Contains("general.architecture") && Contains("gpt2"));

    mk::GgufWriter freqs = llama_gguf_metadata();
    std::vector<float> factors = {1, 2, 4, 8, 8, 8, 8, 8};  // (head_dim/2) f32
    freqs.add_tensor_f32("rope_freqs.weight", mk::DType::F32, {8}, factors);
    CHECK(config_of(freqs).rope_freq_factors == factors);
    mk::GgufWriter short_freqs = llama_gguf_metadata();
    short_freqs.add_tensor_f32("rope_freqs.weight", mk::DType::F32, {4}, std::vector<float>{1, 2, 3, 4});
    CHECK_THROWS_WITH(config_of(short_freqs), Contains("rope_freqs.weight"));
}

TEST_CASE("ModelConfig::hash is stable and covers the computation", "[cpu]") {
    mk::ModelConfig a = mk::config_from_hf_json(kSmolLm2Json, "a/config.json");
    mk::ModelConfig b = a;
    b.name = "another name";
    b.rope_scaling = "described differently";
    CHECK(a.hash() == b.hash());
    // Pinned: a change here invalidates every recorded schedule, so make it on purpose.
    CHECK(a.hash() == 0x7e6296fd33a76829ull);
    for (auto mutate : std::initializer_list<void (*)(mk::ModelConfig&)>{
             [](mk::ModelConfig& c) { c.n_layers += 1; }, [](mk::ModelConfig& c) { c.d_ff += 1; },
             [](mk::ModelConfig& c) { c.rope_base = 10000.0f; }, [](mk::ModelConfig& c) { c.norm_eps = 1e-6f; },
             [](mk::ModelConfig& c) { c.tied_embeddings = false; }, [](mk::ModelConfig& c) { c.qkv_bias = true; },
             [](mk::ModelConfig& c) { c.qk_norm = true; }, [](mk::ModelConfig& c) { c.arch = mk::Arch::qwen2; },
             [](mk::ModelConfig& c) { c.rope_freq_factors.assign(32, 1.0f); },
             [](mk::ModelConfig& c) { c.context_length = 4096; }, [](mk::ModelConfig& c) { c.vocab_size += 1; }}) {
        mk::ModelConfig m = a;
        mutate(m);
        CHECK(m.hash() != a.hash());
    }
}

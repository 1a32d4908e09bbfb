// load_model: the real SmolLM2 file, the RoPE row convention (HF and GGUF layouts load to identical rows,
// and adjacent-pair RoPE on permuted rows equals rotate-half RoPE on the originals), and bad files.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/gguf_writer.hpp"
#include "models/model.hpp"
#include "models/quant.hpp"
#include "models/synthetic.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

using Catch::Matchers::Contains;

namespace {

std::filesystem::path out_dir() {
    auto dir = mk::test::output_dir() / "model_test";
    std::filesystem::create_directories(dir);
    return dir;
}

// Writes a synthetic model under out_dir(); `file` is the .gguf name or the directory name.
std::filesystem::path write_model(const std::string& spec, const std::string& file) {
    auto path = out_dir() / file;
    std::filesystem::remove_all(path);
    mk::write_synthetic_model(mk::parse_synthetic_spec(spec), path);
    return path;
}

std::string load_error(const std::filesystem::path& path) {
    try {
        mk::load_model(path);
    } catch (const mk::Error& e) {
        return e.what();
    }
    return "no error";
}

// Copies a GGUF file, letting `edit` replace or drop tensors (it returns true when it handled one).
void rewrite_gguf(const std::filesystem::path& src, const std::filesystem::path& dst,
                  const std::function<bool(const mk::TensorView&, mk::GgufWriter&)>& edit) {
    mk::GgufFile f = mk::GgufFile::open(src);
    mk::GgufWriter w;
    for (const auto& [key, value] : f.metadata()) w.add(key, value);
    for (const mk::GgufTensorInfo& info : f.tensors()) {
        mk::TensorView t = f.tensor(info.name);
        if (!edit(t, w)) w.add_tensor(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    w.write(dst);
}

bool same_bytes(const mk::TensorView& a, const mk::TensorView& b) {
    return a.dtype == b.dtype && a.shape == b.shape && a.n_bytes == b.n_bytes && std::memcmp(a.data, b.data, a.n_bytes) == 0;
}

// RoPE on one vector of n_heads · head_dim values, in either pairing.
void rope(std::vector<double>& q, int64_t head_dim, int64_t pos, double base, bool rotate_half) {
    const int64_t half = head_dim / 2;
    for (size_t h = 0; h < q.size() / size_t(head_dim); ++h)
        for (int64_t i = 0; i < half; ++i) {
            double theta = double(pos) * std::pow(base, -2.0 * double(i) / double(head_dim));
            size_t a = h * size_t(head_dim) + size_t(rotate_half ? i : 2 * i);
            size_t b = h * size_t(head_dim) + size_t(rotate_half ? i + half : 2 * i + 1);
            double x = q[a], y = q[b];
            q[a] = x * std::cos(theta) - y * std::sin(theta);
            q[b] = x * std::sin(theta) + y * std::cos(theta);
        }
}

std::vector<double> matvec(const std::vector<float>& w, const std::vector<float>& x) {
    std::vector<double> y(w.size() / x.size());  // (rows) f64
    for (size_t r = 0; r < y.size(); ++r)
        for (size_t c = 0; c < x.size(); ++c) y[r] += double(w[r * x.size() + c]) * double(x[c]);
    return y;
}

}  // namespace

TEST_CASE("load the real SmolLM2 GGUF", "[cpu][model]") {
    auto path = mk::test::default_model_path();
    MK_SKIP_IF_MISSING(path, "./tools/setup.sh");
    mk::Model m = mk::load_model(path);
    CHECK(m.format == mk::ModelFormat::gguf);
    CHECK(m.layers.size() == 30);
    CHECK_FALSE(m.qk_rows_permuted);
    CHECK(m.lm_head.data == m.token_embedding.data);
    CHECK(m.token_embedding.shape == std::vector<int64_t>{49152, 576});
    CHECK(m.layers[29].w_up.shape == std::vector<int64_t>{1536, 576});
    CHECK(m.layers[3].wk.shape == std::vector<int64_t>{192, 576});
    CHECK(m.layers[0].bq.data == nullptr);
    CHECK(m.layers[0].q_norm.data == nullptr);
    CHECK(m.output_norm.dtype == mk::DType::F32);
    CHECK(m.layers[7].attn_norm.dtype == mk::DType::F32);
    CHECK(m.weights().size() == 1 + 30 * 9 + 1);  // embedding, 9 per layer, output_norm
    CHECK(m.tokenizer.vocab_size() == 49152);
    CHECK_THAT(m.chat_template, Contains("<|im_start|>"));
    // REFERENCE.md: Q8_0 embedding, 210 Q4_1 matrices, 61 F32 norms, ~97 MB read per token.
    CHECK(m.token_embedding.dtype == mk::DType::Q8_0);
    CHECK(m.layers[0].w_up.dtype == mk::DType::Q4_1);
    CHECK(m.layers[29].wq.dtype == mk::DType::Q4_1);
    CHECK(m.per_token_weight_bytes == 96'576'768);
    CHECK(m.total_weight_bytes == m.per_token_weight_bytes);  // tied: the embedding is the LM head
}

TEST_CASE("permute_rope_rows: inverse pairs and the layout it produces", "[cpu]") {
    // Two heads of head_dim 6, one byte per row: rotate-half rows 0..5 are x0 x1 x2 | y0 y1 y2.
    std::vector<uint8_t> rh = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};  // (2 heads · 6) rows of 1 byte
    std::vector<uint8_t> adj(rh.size()), back(rh.size());
    mk::permute_rope_rows(rh.data(), adj.data(), 12, 1, 6, true);
    CHECK(adj == std::vector<uint8_t>{0, 10, 1, 11, 2, 12, 20, 30, 21, 31, 22, 32});
    mk::permute_rope_rows(adj.data(), back.data(), 12, 1, 6, false);
    CHECK(back == rh);
    CHECK_THROWS(mk::permute_rope_rows(rh.data(), adj.data(), 12, 1, 5, true));
}

TEST_CASE("adjacent-pair RoPE on permuted rows equals rotate-half RoPE on the original rows", "[cpu]") {
    const int64_t head_dim = 8, n_heads = 2, d = 5;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> wq(size_t(n_heads * head_dim * d)), wk(wq.size()), x(d), y(d);  // (16, 5) f32 rows; (5) f32
    for (auto* v : {&wq, &wk, &x, &y})
        for (float& e : *v) e = u(rng);
    std::vector<float> wq_adj(wq.size()), wk_adj(wk.size());  // (16, 5) f32, adjacent-pair rows
    mk::permute_rope_rows(reinterpret_cast<const uint8_t*>(wq.data()), reinterpret_cast<uint8_t*>(wq_adj.data()),
                          n_heads * head_dim, d * sizeof(float), head_dim, true);
    mk::permute_rope_rows(reinterpret_cast<const uint8_t*>(wk.data()), reinterpret_cast<uint8_t*>(wk_adj.data()),
                          n_heads * head_dim, d * sizeof(float), head_dim, true);

    for (int64_t pos_q : {0, 3, 17})
        for (int64_t pos_k : {0, 5}) {
            std::vector<double> q = matvec(wq, x), k = matvec(wk, y), qa = matvec(wq_adj, x), ka = matvec(wk_adj, y);
            rope(q, head_dim, pos_q, 10000.0, true);
            rope(k, head_dim, pos_k, 10000.0, true);
            rope(qa, head_dim, pos_q, 10000.0, false);
            rope(ka, head_dim, pos_k, 10000.0, false);
            for (int64_t h = 0; h < n_heads; ++h) {
                double score = 0, score_adj = 0;
                for (int64_t i = 0; i < head_dim; ++i) {
                    size_t at = size_t(h * head_dim + i);
                    score += q[at] * k[at];
                    score_adj += qa[at] * ka[at];
                    // The rotated vectors themselves are the same values, permuted.
                    size_t adj = size_t(h * head_dim + 2 * (i % (head_dim / 2)) + i / (head_dim / 2));
                    CHECK(qa[adj] == Approx(q[at]).margin(1e-12));
                }
                CHECK(score_adj == Approx(score).margin(1e-12));
            }
        }
}

TEST_CASE("HF and GGUF layouts load to byte-identical weights", "[cpu]") {
    for (const char* shape : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"}) {
        for (const char* dtype : {"f32", "bf16"}) {
            std::string base = fmt::format("synthetic:{}:{}:seed=11", shape, dtype);
            mk::Model g = mk::load_model(write_model(base + ":format=gguf", fmt::format("layout-{}-{}.gguf", shape, dtype)));
            mk::Model h = mk::load_model(write_model(base + ":format=safetensors", fmt::format("layout-{}-{}", shape, dtype)));
            INFO(shape << " " << dtype);
            CHECK(g.config.hash() == h.config.hash());
            CHECK(h.qk_rows_permuted);
            CHECK(g.qk_rows_permuted == (g.config.arch != mk::Arch::llama));
            auto gw = g.weights(), hw = h.weights();
            REQUIRE(gw.size() == hw.size());
            for (size_t i = 0; i < gw.size(); ++i) {
                INFO(gw[i]->name << " vs " << hw[i]->name);
                CHECK(same_bytes(*gw[i], *hw[i]));
            }
            CHECK(g.per_token_weight_bytes == h.per_token_weight_bytes);
            CHECK(g.chat_template == h.chat_template);
        }
    }
}

TEST_CASE("load_model rejects bad GGUF tensors naming the file and tensor", "[cpu]") {
    auto good = write_model("synthetic:tiny-llama:q8_0:seed=3", "bad-base.gguf");
    CHECK(load_error(good) == "no error");

    auto missing = out_dir() / "bad-missing.gguf";
    rewrite_gguf(good, missing, [](const mk::TensorView& t, mk::GgufWriter&) { return t.name == "blk.1.ffn_up.weight"; });
    CHECK_THAT(load_error(missing), Contains("bad-missing.gguf: tensor blk.1.ffn_up.weight: missing"));

    auto shape = out_dir() / "bad-shape.gguf";
    rewrite_gguf(good, shape, [](const mk::TensorView& t, mk::GgufWriter& w) {
        if (t.name != "blk.1.ffn_up.weight") return false;
        w.add_tensor_f32(t.name, mk::DType::F32, {64, 64}, std::vector<float>(64 * 64, 0.5f));
        return true;
    });
    CHECK_THAT(load_error(shape),
               Contains("bad-shape.gguf: tensor blk.1.ffn_up.weight: expected shape [256, 64], got [64, 64]"));

    auto norm = out_dir() / "bad-norm.gguf";
    rewrite_gguf(good, norm, [](const mk::TensorView& t, mk::GgufWriter& w) {
        if (t.name != "blk.0.attn_norm.weight") return false;
        w.add_tensor_f32(t.name, mk::DType::Q8_0, {64}, std::vector<float>(64, 1.0f));
        return true;
    });
    CHECK_THAT(load_error(norm), Contains("bad-norm.gguf: tensor blk.0.attn_norm.weight") && Contains("Q8_0"));

    CHECK_THAT(load_error(out_dir() / "does-not-exist.gguf"), Contains("does-not-exist.gguf"));
}

TEST_CASE("load_model rejects bad safetensors directories naming the file, tensor or key", "[cpu]") {
    auto fresh = [](const std::string& name) { return write_model("synthetic:tiny-qwen2:f32:seed=5:format=safetensors", name); };
    auto good = fresh("st-good");
    CHECK(load_error(good) == "no error");
    CHECK(load_error(good / "model.safetensors") == "no error");  // the file means its directory

    // F32 -> I32 keeps every size consistent, so only the dtype is wrong.
    auto dtype = fresh("st-dtype");
    {
        std::fstream f(dtype / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        std::string head(16384, '\0');
        f.read(head.data(), std::streamsize(head.size()));
        size_t at = head.find("\"model.layers.0.mlp.up_proj.weight\"");
        REQUIRE(at != std::string::npos);
        size_t dt = head.find("\"F32\"", at);
        REQUIRE(dt != std::string::npos);
        f.clear();
        f.seekp(std::streamoff(dt + 1));
        f.write("I", 1);
    }
    CHECK_THAT(load_error(dtype),
               Contains("model.safetensors: tensor model.layers.0.mlp.up_proj.weight: unsupported dtype I32"));

    auto truncated = fresh("st-truncated");
    std::filesystem::resize_file(truncated / "model.safetensors", 100);
    CHECK_THAT(load_error(truncated), Contains("model.safetensors: truncated header"));

    auto key = fresh("st-key");
    {
        std::ifstream in(key / "config.json");
        nlohmann::json j = nlohmann::json::parse(in);
        j.erase("intermediate_size");
        std::ofstream(key / "config.json") << j.dump();
    }
    CHECK_THAT(load_error(key), Contains("config.json: missing key intermediate_size"));

    auto no_tok = fresh("st-no-tokenizer");
    std::filesystem::remove(no_tok / "tokenizer.json");
    CHECK_THAT(load_error(no_tok), Contains("tokenizer.json"));

    auto shape = fresh("st-shape");
    {
        std::ifstream in(shape / "config.json");
        nlohmann::json j = nlohmann::json::parse(in);
        j["intermediate_size"] = 128;
        std::ofstream(shape / "config.json") << j.dump();
    }
    CHECK_THAT(load_error(shape),
               Contains("model.safetensors: tensor model.layers.0.mlp.gate_proj.weight: expected shape [128, 64], got [256, 64]"));
}

// The verifier, simulator and .mks format on schedules the compiler makes for real model shapes:
// they verify clean, and the verifier stays fast at H200 scale (132 streams, ~10k instructions a step);
// a synthetic spec's shape alone gives the formats and config hash its written model would.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <optional>

#include "models/synthetic.hpp"
#include "models/tensor.hpp"
#include "scheduler/assign.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/counters.hpp"
#include "scheduler/graph.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/simulate.hpp"
#include "scheduler/verify.hpp"
#include "tests/test_paths.hpp"

using namespace mk;

namespace {

// Weight formats of a bf16 model of these dimensions (norms f32, no biases or QK norms).
std::vector<WeightFormat> bf16_weights(const ModelDims& d) {
    std::vector<WeightFormat> w(n_weight_ids(d.n_layers));
    auto set = [&](uint32_t id, DType t, uint32_t rows, uint32_t cols) {
        w[id] = {uint32_t(t), rows, cols, uint64_t(cols) * (t == DType::F32 ? 4 : 2)};
    };
    set(global_weight_id(GlobalWeight::token_embedding), DType::BF16, d.vocab, d.d_model);
    set(global_weight_id(GlobalWeight::output_norm), DType::F32, 1, d.d_model);
    set(global_weight_id(GlobalWeight::lm_head), DType::BF16, d.vocab, d.d_model);
    for (uint32_t L = 0; L < d.n_layers; ++L) {
        auto id = [&](LayerWeight lw) { return layer_weight_id(L, lw); };
        set(id(LayerWeight::attn_norm), DType::F32, 1, d.d_model);
        set(id(LayerWeight::ffn_norm), DType::F32, 1, d.d_model);
        set(id(LayerWeight::wq), DType::BF16, d.q_dim(), d.d_model);
        set(id(LayerWeight::wk), DType::BF16, d.kv_dim(), d.d_model);
        set(id(LayerWeight::wv), DType::BF16, d.kv_dim(), d.d_model);
        set(id(LayerWeight::wo), DType::BF16, d.d_model, d.q_dim());
        set(id(LayerWeight::w_gate), DType::BF16, d.d_ff, d.d_model);
        set(id(LayerWeight::w_up), DType::BF16, d.d_ff, d.d_model);
        set(id(LayerWeight::w_down), DType::BF16, d.d_model, d.d_ff);
    }
    return w;
}

ModelDims dims(uint32_t layers, uint32_t d_model, uint32_t heads, uint32_t kv_heads, uint32_t head_dim, uint32_t d_ff,
               uint32_t vocab) {
    ModelDims d;
    d.n_layers = layers;
    d.d_model = d_model;
    d.n_heads = heads;
    d.n_kv_heads = kv_heads;
    d.head_dim = head_dim;
    d.d_ff = d_ff;
    d.vocab = vocab;
    return d;
}

Schedule compile(const ModelDims& d, const Target& target, Policy policy) {
    const Graph graph = build_decode_graph(d, bf16_weights(d), target);
    Schedule s = build_schedule(graph, assign(graph, target, policy), target);
    s.policy = policy_name(policy);
    return s;
}

}  // namespace

TEST_CASE("compiled SmolLM2-135M-shaped schedules verify, simulate and round-trip", "[cpu]") {
    const ModelDims d = dims(30, 576, 9, 3, 64, 1536, 49152);
    for (Policy policy : {Policy::round_robin, Policy::critical_path}) {
        const Schedule s = compile(d, target_cpu(), policy);
        const VerifyReport r = verify(s);
        INFO(policy_name(policy) << ": " << r.summary());
        CHECK(r.ok);
        const Simulation sim = simulate(s);
        CHECK(sim.makespan_ns > 0);
        CHECK(sim.critical_path.size() >= 2);
        const std::vector<uint8_t> bytes = serialize_schedule(s);
        CHECK(serialize_schedule(parse_schedule(bytes.data(), bytes.size(), "smol.mks")) == bytes);
    }
}

TEST_CASE("a Llama-3.2-1B-shaped H200 schedule verifies and a dropped wait is caught", "[cpu][slow]") {
    const ModelDims d = dims(16, 2048, 32, 8, 64, 8192, 128256);
    const Schedule s = compile(d, target_h200(), Policy::critical_path);
    const auto start = std::chrono::steady_clock::now();
    const VerifyReport r = verify(s);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    INFO(r.summary());
    CHECK(r.ok);
    const Simulation sim = simulate(s);
    WARN("llama-1b on h200: " << r.stats.n_instructions << " instructions a step on " << r.stats.n_streams
                              << " streams, " << r.stats.n_conflicts << " orderings and " << r.stats.n_fence_checks
                              << " fence pairs checked in " << ms << " ms; simulated step " << sim.makespan_ns / 1000.0
                              << " us (" << sim.weight_gbs() << " GB/s of weights)");

    // Drop the wait of the first O-projection / down-projection block that has one: something must race.
    std::optional<WaitRef> drop;
    for (uint32_t k = 0; k < s.streams.size() && !drop; ++k)
        for (uint32_t i = 0; i < s.streams[k].size() && !drop; ++i)
            if (s.streams[k][i].n_waits > 0 && s.streams[k][i].opcode == uint16_t(Opcode::matvec_add))
                drop = WaitRef{k, i, 0};
    REQUIRE(drop);
    const VerifyReport dropped = verify(s, {.ignore_waits = {*drop}});
    INFO(dropped.summary());
    CHECK_FALSE(dropped.ok);
}

namespace {

bool same_formats(const std::vector<WeightFormat>& a, const std::vector<WeightFormat>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].dtype != b[i].dtype || a[i].rows != b[i].rows || a[i].cols != b[i].cols ||
            a[i].row_bytes != b[i].row_bytes)
            return false;
    return true;
}

}  // namespace

TEST_CASE("a synthetic spec schedules from its shape as from the written model", "[cpu]") {
    const auto dir = test::output_dir() / "synthetic_formats";
    std::filesystem::create_directories(dir);
    // Tied and untied, llama3 RoPE scaling, biases, QK norms; block formats with fallbacks; both file formats.
    for (const char* text : {"synthetic:tiny-llama:q4_k:seed=3", "synthetic:tiny-llama3:q8_0",
                             "synthetic:tiny-qwen2:q4_1", "synthetic:tiny-qwen3:bf16:format=safetensors",
                             "synthetic:llama-3.1-8b:q6_k:layers=1:vocab=300:d_model=256:ff=512:heads=8:head_dim=32"}) {
        INFO(text);
        const SyntheticSpec spec = parse_synthetic_spec(text);
        std::string name = to_string(spec);
        for (char& c : name)
            if (c == ':' || c == '=') c = '_';
        const auto path = dir / name;
        std::filesystem::remove_all(path);
        write_synthetic_model(spec, path);
        const Model model = load_model(path);
        const std::vector<WeightFormat> formats = synthetic_weight_formats(spec);
        CHECK(same_formats(formats, weight_formats(model)));
        const Schedule from_shape = compile_schedule(synthetic_config(spec), formats, target_cpu(), Policy::critical_path);
        const Schedule from_file =
            compile_schedule(model.config, weight_formats(model), target_cpu(), Policy::critical_path);
        CHECK(from_shape.config_hash == from_file.config_hash);
        CHECK(from_shape.n_instructions() == from_file.n_instructions());
    }
    // The 70B shape: 141 GB of bf16 weights that are never written.
    const std::vector<WeightFormat> big = synthetic_weight_formats(parse_synthetic_spec("synthetic:llama-3.1-70b:bf16"));
    uint64_t bytes = 0;
    for (const WeightFormat& f : big) bytes += f.rows * f.row_bytes;
    CHECK(bytes / 1'000'000'000 == 141);
    CHECK(big[layer_weight_id(79, LayerWeight::w_down)].cols == 28672);
    CHECK(big[global_weight_id(GlobalWeight::lm_head)].rows == 128256);
}

// An HF directory written by transformers itself (tests/reference/hf_tiny_model.py, run by
// tools/gpu-check.sh into $MK_HF_DIR) against transformers' own logits: the CPU backend, the resident
// CUDA interpreter and the kernel-per-op baseline, teacher-forced over the whole sequence. Skipped,
// with a warning, when MK_HF_DIR is unset.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model.hpp"
#include "runtime/backend.hpp"

namespace mk {
namespace {

struct Expected {
    std::vector<int32_t> tokens;
    std::vector<std::vector<double>> logits;  // (n_tokens, vocab) at every position
};

Expected read_expected(const std::filesystem::path& path) {
    std::ifstream in(path);
    INFO("expected logits " << path.string() << " (tests/reference/hf_tiny_model.py writes it)");
    REQUIRE(in.good());
    nlohmann::json j = nlohmann::json::parse(in);
    Expected e;
    e.tokens = j.at("tokens").get<std::vector<int32_t>>();
    e.logits = j.at("logits").get<std::vector<std::vector<double>>>();
    REQUIRE(e.tokens.size() == e.logits.size());
    return e;
}

// ||a - b|| / ||b||; NaN never passes.
double rel_l2(std::span<const float> a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        norm += b[i] * b[i];
    }
    return std::sqrt(diff / norm);
}

// Steps the expected tokens through `backend` and checks every position's logits within `tolerance`.
void check_backend(const Model& model, const Expected& e, const std::string& backend, double tolerance) {
    api::BackendOptions options;
    options.backend = backend;
    options.ctx_len = uint32_t(std::max<size_t>(64, e.tokens.size()));
    options.cpu_dots = "exact";
    std::unique_ptr<Program> program = make_program(model, options);
    double worst = 0;
    for (size_t pos = 0; pos < e.tokens.size(); ++pos) {
        program->step(e.tokens[pos], int32_t(pos), SamplingParams{},
                      std::span<const int32_t>(e.tokens.data(), pos));
        const double err = rel_l2(program->logits(), e.logits[pos]);
        worst = std::max(worst, err);
        INFO(backend << " position " << pos << " token " << e.tokens[pos]);
        CHECK(err < tolerance);
    }
    WARN(backend << ": worst relative L2 error of the logits " << worst << " (tolerance " << tolerance << ")");
}

}  // namespace

TEST_CASE("HF transformers' tiny Llama: CPU and CUDA logits match transformers' own", "[cuda][hf]") {
    const char* dir = std::getenv("MK_HF_DIR");
    if (!dir || !*dir) {
        WARN("MK_HF_DIR is unset: skipped (tools/gpu-check.sh writes the model with tests/reference/hf_tiny_model.py)");
        return;
    }
    const Model model = load_model(dir);
    REQUIRE(model.qk_rows_permuted);  // HF files are rotate-half: the loader's permutation is under test
    const Expected e = read_expected(std::filesystem::path(dir) / "expected_logits.json");
    SECTION("cpu") { check_backend(model, e, "cpu", 1e-3); }
    SECTION("cuda") { check_backend(model, e, "cuda", 1e-2); }
    SECTION("cuda-kernels") { check_backend(model, e, "cuda-kernels", 1e-2); }
}

}  // namespace mk

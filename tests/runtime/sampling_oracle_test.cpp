// sample_token against the independent Python reference (tests/reference/sampling_oracle.py, the
// oracle_sampling fixture): the same token for every case — each filter alone and combined — and the
// same Philox uniform draws, bit for bit.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "instructions/sample/philox.hpp"
#include "instructions/sample/sampling.hpp"
#include "tests/test_paths.hpp"

namespace mk {
namespace {

nlohmann::json read_sampling_oracle() {
    const auto path = test::output_dir() / "sampling_oracle.json";
    std::ifstream in(path);
    INFO("sampling oracle " << path.string() << " (written by the oracle_sampling fixture of this ctest run)");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("sample_token matches the Python reference for every filter", "[cpu][sampling]") {
    const nlohmann::json oracle = read_sampling_oracle();
    std::map<std::string, int> n_by_filter;
    int n_checked = 0;
    for (const nlohmann::json& c : oracle.at("cases")) {
        const std::vector<float> logits = c.at("logits").get<std::vector<float>>();
        const std::vector<int32_t> history = c.at("history").get<std::vector<int32_t>>();
        const nlohmann::json& p = c.at("params");
        SamplingParams params;
        params.temperature = p.at("temperature").get<float>();
        params.top_k = p.at("top_k").get<int32_t>();
        params.top_p = p.at("top_p").get<float>();
        params.min_p = p.at("min_p").get<float>();
        params.repeat_penalty = p.at("repeat_penalty").get<float>();
        params.repeat_last_n = p.at("repeat_last_n").get<int32_t>();
        params.seed = p.at("seed").get<uint64_t>();
        const int32_t position = c.at("position").get<int32_t>();
        const int32_t got = sample_token(logits.data(), uint32_t(logits.size()), params, history.data(),
                                         int32_t(history.size()), position);
        INFO("case " << n_checked << " (" << c.at("name").get<std::string>() << "): vocab " << logits.size()
                     << ", params " << p.dump() << ", position " << position);
        CHECK(got == c.at("token").get<int32_t>());
        n_by_filter[c.at("name").get<std::string>()]++;
        n_checked++;
    }
    CHECK(n_checked >= 300);
    for (const char* filter : {"greedy", "greedy_penalty", "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                               "combined"}) {
        INFO(filter);
        CHECK(n_by_filter[filter] >= 30);
    }
}

TEST_CASE("philox_uniform matches the Python Philox4x32-10 bit for bit", "[cpu][sampling]") {
    const nlohmann::json oracle = read_sampling_oracle();
    int n = 0;
    for (const nlohmann::json& d : oracle.at("philox_uniform")) {
        const uint64_t seed = d.at("seed").get<uint64_t>(), step = d.at("step").get<uint64_t>();
        INFO("seed " << seed << " step " << step);
        CHECK(philox_uniform(seed, step) == d.at("uniform").get<double>());
        ++n;
    }
    CHECK(n >= 32);
}

}  // namespace mk

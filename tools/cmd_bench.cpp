// mk bench: llama-bench-style throughput: prompt processing (ppN) and generation (tgN) tokens/s,
// mean ± sd over repetitions, with the weight bandwidth each achieves (a prompt reads the weights once a prefill
// chunk). Output md, json or csv.
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mk/mk.hpp"
#include "models/error.hpp"
#include "tools/backend_options.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

struct BenchCli {
    std::string model, output = "md";
    std::vector<int32_t> n_prompt{512}, n_gen{128};
    int32_t reps = 5;
    BackendOptions backend;
};

struct BenchResult {
    std::string test;
    int32_t n_tokens = 0;
    std::vector<double> tokens_per_s;
    double passes_per_token = 1;  // passes over the weights per token (a prompt's: one a prefill chunk)
    double mean() const {
        double s = 0;
        for (double v : tokens_per_s) s += v;
        return tokens_per_s.empty() ? 0 : s / tokens_per_s.size();
    }
    double sd() const {
        if (tokens_per_s.size() < 2) return 0;
        double m = mean(), s = 0;
        for (double v : tokens_per_s) s += (v - m) * (v - m);
        return std::sqrt(s / (tokens_per_s.size() - 1));
    }
};

// Tokens/s of `n` steps from position 0, greedy, as one generation through the API, so a backend that
// runs the generation loop on its device (the resident CUDA kernel) gets it as one command: tgN generates
// n tokens from a one-token prompt, ppN feeds an n-token prompt (a fixed pseudo-random token stream, in prefill
// chunks of --batch tokens; the resident kernel runs its last token as the device loop's first step).
struct Timed {
    double tokens_per_s, passes_per_token;  // the latter: the weights' passes (GenerateResult::n_weight_passes) a token
};
Timed time_steps(api::Session& session, int32_t n, int32_t vocab, bool prompt) {
    std::vector<int32_t> tokens(size_t(prompt ? n : 1));
    for (size_t p = 0; p < tokens.size(); ++p) tokens[p] = int32_t((1 + int64_t(p) * 7919) % vocab);
    api::GenerateOptions options;
    options.max_tokens = prompt ? 1 : n;
    options.stop_at_end = false;
    const auto t0 = std::chrono::steady_clock::now();
    const api::GenerateResult r = session.generate(std::span<const int32_t>(tokens), options);
    const int32_t steps = r.n_prompt + r.n_eval_steps;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {steps / s, double(r.n_weight_passes) / steps};
}

// The weight GB/s a test achieves: the weights' bytes times their passes a second.
double weight_gbs(const BenchResult& r, double gb_per_token) { return r.mean() * r.passes_per_token * gb_per_token; }

}  // namespace

void register_bench(CLI::App& app) {
    auto o = std::make_shared<BenchCli>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure prompt (pp) and generation (tg) throughput, like llama-bench");
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec such as synthetic:llama-3.2-1b:bf16");
    cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for the pp tests, a list such as 64,512 (0: skip)")
        ->delimiter(',')->check(CLI::NonNegativeNumber);
    cmd->add_option("-n,--n-gen", o->n_gen, "Generated tokens for the tg tests, a list (0: skip)")
        ->delimiter(',')->check(CLI::NonNegativeNumber);
    cmd->add_option("-r,--repetitions", o->reps, "Repetitions of each test")->check(CLI::PositiveNumber);
    cmd->add_option("-o,--output", o->output, "md | json | csv")->check(CLI::IsMember({"md", "json", "csv"}));
    add_backend_options(cmd, o->backend);
    cmd->callback([o] {
        const api::Model model = api::Model::load(o->model);
        const api::ModelInfo info = model.info();
        BackendOptions backend = o->backend;
        std::vector<BenchResult> results;
        int32_t longest = 0;
        for (int32_t n : o->n_prompt)
            if (n) results.push_back({fmt::format("pp{}", n), n, {}}), longest = std::max(longest, n);
        for (int32_t n : o->n_gen)
            if (n) results.push_back({fmt::format("tg{}", n), n, {}}), longest = std::max(longest, n);
        if (results.empty()) fail("nothing to measure: both -p and -n are 0");
        if (!backend.ctx_len) backend.ctx_len = uint32_t(longest + 1);
        api::Session session = model.new_session(backend);
        const int32_t vocab = int32_t(info.vocab_size);
        time_steps(session, std::min(8, longest), vocab, false);  // warm-up: decode steps and a prefill chunk
        time_steps(session, std::min(int32_t(backend.batch), longest), vocab, true);
        for (BenchResult& r : results) {
            for (int32_t i = 0; i < o->reps; ++i) {
                fmt::print(stderr, "\rmk bench: {} repetition {}/{} ...   ", r.test, i + 1, o->reps);
                const Timed t = time_steps(session, r.n_tokens, vocab, r.test[0] == 'p');
                r.tokens_per_s.push_back(t.tokens_per_s);
                r.passes_per_token = t.passes_per_token;
            }
        }
        fmt::print(stderr, "\r{:60}\r", "");

        const double gb_per_token = info.weight_bytes_per_token / 1e9;
        const std::string name = info.name.empty() ? std::filesystem::path(info.path).filename().string() : info.name;
        const std::string backend_name = session.backend();
        const uint32_t n_sms = session.schedule().info().n_sms, n_threads = session.n_threads();
        const std::string backend_label = fmt::format("{} ({} SMs)", backend_name, n_sms);
        if (o->output == "json") {
            nlohmann::json rows = nlohmann::json::array();
            for (const BenchResult& r : results)
                rows.push_back({{"model", name}, {"size_bytes", info.weight_bytes}, {"params", info.n_params},
                                {"backend", backend_name}, {"sms", n_sms},
                                {"threads", n_threads}, {"test", r.test}, {"n_tokens", r.n_tokens},
                                {"tokens_per_s", r.mean()}, {"tokens_per_s_sd", r.sd()}, {"samples", r.tokens_per_s},
                                {"weight_gb_per_s", weight_gbs(r, gb_per_token)}});
            fmt::print("{}\n", rows.dump(2));
        } else if (o->output == "csv") {
            fmt::print("model,size_bytes,params,backend,sms,threads,test,tokens_per_s,tokens_per_s_sd,weight_gb_per_s\n");
            for (const BenchResult& r : results)
                fmt::print("\"{}\",{},{},{},{},{},{},{:.3f},{:.3f},{:.3f}\n", name, info.weight_bytes, info.n_params,
                           backend_name, n_sms, n_threads, r.test,
                           r.mean(), r.sd(), weight_gbs(r, gb_per_token));
        } else {
            fmt::print("| model | size | params | backend | threads | test | t/s | GB/s |\n");
            fmt::print("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n");
            for (const BenchResult& r : results)
                fmt::print("| {} | {:.1f} MiB | {:.1f} M | {} | {} | {} | {:.2f} ± {:.2f} | {:.2f} |\n", name,
                           info.weight_bytes / 1048576.0, info.n_params / 1e6, backend_label, n_threads,
                           r.test, r.mean(), r.sd(), weight_gbs(r, gb_per_token));
        }
    });
}

}  // namespace mk::tools

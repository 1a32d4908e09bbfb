// mk generate: text generation from the command line, streamed to stdout, with a timing summary
// (llama.cpp's format) on stderr at the end, Ctrl-C included.
#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mk/mk.hpp"
#include "models/error.hpp"
#include "tools/backend_options.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

std::atomic<bool> g_generate_interrupted{false};
extern "C" void on_generate_sigint(int) { g_generate_interrupted.store(true); }

struct GenerateCli {
    std::string model, prompt, system;
    int32_t n_predict = 128;
    api::SamplingOptions sampling;
    bool chat = false, json = false, ignore_eos = false;
    BackendOptions backend;
};

// The prompt text as given (the API wraps it in the chat template); CLI-level checks only.
std::string prompt_text(const GenerateCli& o) {
    std::string text = o.prompt;
    if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (!o.chat && !o.system.empty()) fail("--system needs --chat");
    if (text.empty()) fail("the prompt is empty (-p TEXT, or -p - to read standard input)");
    return text;
}

void print_summary(const api::GenerateResult& r, bool interrupted, double load_ms, double total_ms,
                   const api::ModelInfo& model, const api::Session& session, bool json) {
    const double bytes = double(model.weight_bytes_per_token);
    auto per = [](double ms, int n) { return n ? ms / n : 0.0; };
    auto rate = [](double ms, int n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
    const double eval_per_token = per(r.eval_ms, r.n_eval_steps);
    const double gbs = eval_per_token > 0 ? bytes / (eval_per_token * 1e6) : 0.0;
    const api::ScheduleInfo schedule = session.schedule().info();
    const int n_generated = int(r.tokens.size());
    if (json) {
        nlohmann::json j = {{"backend", session.backend()}, {"threads", session.n_threads()},
                            {"sms", schedule.n_sms}, {"tp", schedule.tp},
                            {"load_ms", load_ms},
                            {"prompt_tokens", r.n_prompt}, {"prompt_ms", r.prompt_ms},
                            {"prompt_tokens_per_s", rate(r.prompt_ms, r.n_prompt)}, {"generated_tokens", n_generated},
                            {"eval_steps", r.n_eval_steps}, {"eval_ms", r.eval_ms},
                            {"eval_tokens_per_s", rate(r.eval_ms, r.n_eval_steps)}, {"total_ms", total_ms},
                            {"weight_bytes_per_token", model.weight_bytes_per_token}, {"weight_gb_per_s", gbs},
                            {"stopped_at_eog", r.stopped_at_end}, {"cancelled", interrupted}, {"tokens", r.tokens}};
        fmt::print(stderr, "{}\n", j.dump());
        return;
    }
    const std::string ranks = schedule.tp > 1 ? fmt::format(" in {} tensor-parallel ranks", schedule.tp) : "";
    // The CPU backend runs its virtual SMs on host threads; a device backend's SMs are the GPU's (or emulated ones).
    const std::string sms = session.backend() == "cpu"
                                ? fmt::format("{} virtual SMs{} on {} threads", schedule.n_sms, ranks, session.n_threads())
                                : fmt::format("{} SMs{}", schedule.n_sms, ranks);
    fmt::print(stderr, "\n\nmk: backend {} ({}){}\n", session.backend(), sms, interrupted ? ", interrupted" : "");
    fmt::print(stderr, "mk: load time        = {:10.2f} ms\n", load_ms);
    fmt::print(stderr, "mk: prompt eval time = {:10.2f} ms / {:5} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
               r.prompt_ms, r.n_prompt, per(r.prompt_ms, r.n_prompt), rate(r.prompt_ms, r.n_prompt));
    fmt::print(stderr, "mk:        eval time = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
               r.eval_ms, r.n_eval_steps, eval_per_token, rate(r.eval_ms, r.n_eval_steps));
    fmt::print(stderr, "mk:       total time = {:10.2f} ms / {:5} tokens\n", total_ms, r.n_prompt + n_generated);
    fmt::print(stderr, "mk: weight bandwidth = {:10.2f} GB/s ({:.1f} MB read per token)\n", gbs, bytes / 1e6);
}

}  // namespace

void register_generate(CLI::App& app) {
    auto o = std::make_shared<GenerateCli>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec (default: SmolLM2-135M-Instruct)");
    cmd->add_option("-p,--prompt", o->prompt, "The prompt; '-' reads standard input")->required();
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate at most")->check(CLI::Range(0, 1 << 20));
    add_sampling_options(cmd, o->sampling);
    cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's own chat template");
    cmd->add_option("--system", o->system, "System message for --chat (default: the template's own)");
    cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
    cmd->add_flag("--json", o->json, "Print the summary as JSON on stderr");
    add_backend_options(cmd, o->backend);
    cmd->callback([o] {
        const auto t_start = std::chrono::steady_clock::now();
        const api::Model model = api::Model::load(o->model);
        api::Session session = model.new_session(o->backend);
        const std::string prompt = prompt_text(*o);
        const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();

        g_generate_interrupted.store(false);
        auto previous = std::signal(SIGINT, on_generate_sigint);
        api::GenerateOptions go;
        go.max_tokens = o->n_predict;
        go.sampling = o->sampling;
        go.stop_at_end = !o->ignore_eos;
        go.chat = o->chat;
        go.system = o->system;
        // Ctrl-C stops the generation at the next piece of text (a handler may only set a flag).
        const api::GenerateResult result = session.generate(prompt, go, [](std::string_view piece) {
            fmt::print("{}", piece);
            std::fflush(stdout);
            return !g_generate_interrupted.load();
        });
        std::signal(SIGINT, previous);
        if (result.context_full)
            fmt::print(stderr, "\nmk: the context of {} tokens is full: generation stopped (raise -c for more)\n",
                       session.context_length());
        const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
        print_summary(result, g_generate_interrupted.load(), load_ms, total_ms, model.info(), session, o->json);
    });
}

}  // namespace mk::tools

// mk generate: text generation from the command line, streamed to stdout, with a timing summary
// (llama.cpp's format) on stderr at the end, Ctrl-C included.
#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "models/chat_template.hpp"
#include "models/error.hpp"
#include "runtime/engine.hpp"
#include "runtime/api/model_source.hpp"
#include "tools/backend_options.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

struct GenerateCli {
    std::string model, prompt, system;
    int32_t n_predict = 128;
    SamplingParams sampling;
    bool chat = false, json = false, ignore_eos = false;
    BackendOptions backend;
};

std::vector<int32_t> prompt_tokens(const Model& model, const GenerateCli& o) {
    std::string text = o.prompt;
    if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (o.chat) {
        if (model.chat_template.empty()) fail("{}: --chat: the model has no chat template", model.path.string());
        ChatTemplate tmpl = ChatTemplate::parse(model.chat_template);
        std::vector<ChatMessage> messages;
        if (!o.system.empty()) messages.push_back({"system", o.system});
        messages.push_back({"user", text});
        text = tmpl.render(messages, true);
    } else if (!o.system.empty()) {
        fail("--system needs --chat");
    }
    if (text.empty()) fail("the prompt is empty (-p TEXT, or -p - to read standard input)");
    return model.tokenizer.encode(text, true);
}

void print_summary(const GenerateStats& s, double load_ms, double total_ms, const Model& model, const Program& program,
                   bool json) {
    const double bytes = double(model.per_token_weight_bytes);
    auto per = [](double ms, int n) { return n ? ms / n : 0.0; };
    auto rate = [](double ms, int n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
    const double eval_per_token = per(s.eval_ms, s.n_eval_steps);
    const double gbs = eval_per_token > 0 ? bytes / (eval_per_token * 1e6) : 0.0;
    if (json) {
        nlohmann::json j = {{"backend", program.backend_name()}, {"threads", program.n_threads()},
                            {"sms", program.schedule().streams.size()}, {"tp", program.schedule().tp_size},
                            {"load_ms", load_ms},
                            {"prompt_tokens", s.n_prompt}, {"prompt_ms", s.prompt_ms},
                            {"prompt_tokens_per_s", rate(s.prompt_ms, s.n_prompt)}, {"generated_tokens", s.n_generated},
                            {"eval_steps", s.n_eval_steps}, {"eval_ms", s.eval_ms},
                            {"eval_tokens_per_s", rate(s.eval_ms, s.n_eval_steps)}, {"total_ms", total_ms},
                            {"weight_bytes_per_token", model.per_token_weight_bytes}, {"weight_gb_per_s", gbs},
                            {"stopped_at_eog", s.stopped_at_eog}, {"cancelled", s.cancelled}, {"tokens", s.tokens}};
        fmt::print(stderr, "{}\n", j.dump());
        return;
    }
    const Schedule& schedule = program.schedule();
    const std::string ranks = schedule.tp_size > 1 ? fmt::format(" in {} tensor-parallel ranks", schedule.tp_size) : "";
    fmt::print(stderr, "\n\nmk: backend {} ({} virtual SMs{} on {} threads){}\n", program.backend_name(),
               schedule.streams.size(), ranks, program.n_threads(), s.cancelled ? ", interrupted" : "");
    fmt::print(stderr, "mk: load time        = {:10.2f} ms\n", load_ms);
    fmt::print(stderr, "mk: prompt eval time = {:10.2f} ms / {:5} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
               s.prompt_ms, s.n_prompt, per(s.prompt_ms, s.n_prompt), rate(s.prompt_ms, s.n_prompt));
    fmt::print(stderr, "mk:        eval time = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
               s.eval_ms, s.n_eval_steps, eval_per_token, rate(s.eval_ms, s.n_eval_steps));
    fmt::print(stderr, "mk:       total time = {:10.2f} ms / {:5} tokens\n", total_ms, s.n_prompt + s.n_generated);
    fmt::print(stderr, "mk: weight bandwidth = {:10.2f} GB/s ({:.1f} MB read per token)\n", gbs, bytes / 1e6);
}

}  // namespace

void register_generate(CLI::App& app) {
    auto o = std::make_shared<GenerateCli>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec (default: SmolLM2-135M-Instruct)");
    cmd->add_option("-p,--prompt", o->prompt, "The prompt; '-' reads standard input")->required();
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate at most")->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 is greedy")->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling threshold (1: off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min-p x the top probability (0: off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Penalty on recent tokens (1: off)")->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--repeat-last-n", o->sampling.repeat_last_n, "How many recent tokens the penalty sees")->check(CLI::NonNegativeNumber);
    cmd->add_option("-s,--seed", o->sampling.seed, "Sampling seed: the same seed gives the same text on every backend");
    cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's own chat template");
    cmd->add_option("--system", o->system, "System message for --chat (default: the template's own)");
    cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
    cmd->add_flag("--json", o->json, "Print the summary as JSON on stderr");
    add_backend_options(cmd, o->backend);
    cmd->callback([o] {
        const auto t_start = std::chrono::steady_clock::now();
        Model model = open_model(o->model);
        Engine engine(model, make_program(model, o->backend));
        const std::vector<int32_t> prompt = prompt_tokens(model, *o);
        const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();

        g_interrupted.store(false);
        auto previous = std::signal(SIGINT, on_sigint);
        GenerateOptions go;
        go.n_predict = o->n_predict;
        go.sampling = o->sampling;
        go.stop_at_eog = !o->ignore_eos;
        go.cancel = &g_interrupted;
        GenerateStats stats = engine.generate(prompt, go, [](std::string_view piece) {
            fmt::print("{}", piece);
            std::fflush(stdout);
            return true;
        });
        std::signal(SIGINT, previous);
        if (stats.context_full)
            fmt::print(stderr, "\nmk: the context of {} tokens is full: generation stopped (raise -c for more)\n",
                       engine.program().ctx_len());
        const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
        print_summary(stats, load_ms, total_ms, model, engine.program(), o->json);
    });
}

}  // namespace mk::tools

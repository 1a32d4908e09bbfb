// mk chat: a conversation over the model's chat template. Each turn runs only its own tokens (the
// session's KV cache keeps the history), the reply streams to stdout, Ctrl-C stops the reply, a full
// context offers to drop the oldest turns. From a pipe each line is one user turn, echoed as "> LINE".
#include <fmt/core.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mk/mk.hpp"
#include "tools/backend_options.hpp"
#include "tools/chat_turns.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

std::atomic<bool> g_chat_interrupted{false};
extern "C" void on_chat_sigint(int) { g_chat_interrupted.store(true); }

struct ChatCli {
    std::string model, system;
    int32_t n_predict = 256;
    api::SamplingOptions sampling;
    bool verbose = false, json = false;
    BackendOptions backend;
};

constexpr const char* kHelp =
    "/reset       forget the conversation\n"
    "/save FILE   save the conversation (tokens and KV cache)\n"
    "/load FILE   continue a saved conversation\n"
    "/help        this list\n"
    "/exit        end (so does end of input); Ctrl-C stops a reply\n";

class Chat {
public:
    Chat(const ChatCli& o, api::Model model)
        : o_(o), model_(std::move(model)), turns_(model_, o.system), session_(model_.new_session(o.backend)) {}

    // One input line: a command or a user turn. Returns false to end the conversation.
    bool handle(const std::string& line) {
        if (line == "/exit" || line == "/quit") return false;
        if (line == "/help") {
            fmt::print("{}", kHelp);
        } else if (line == "/reset") {
            session_.reset();
            pending_.clear();
            turn_starts_.clear();
            fmt::print("(the conversation is reset)\n");
        } else if (line.rfind("/save ", 0) == 0) {
            settle();
            session_.save(line.substr(6));
            fmt::print("(saved {} tokens to {})\n", session_.n_past(), line.substr(6));
        } else if (line.rfind("/load ", 0) == 0) {
            session_.load(line.substr(6));
            pending_.clear();
            turn_starts_.clear();  // the loaded turns' bounds are unknown: a full context then starts afresh
            fmt::print("(loaded {} tokens from {})\n", session_.n_past(), line.substr(6));
        } else if (!line.empty() && line[0] == '/') {
            throw Error(fmt::format("unknown command {} (/help lists them)", line));
        } else if (!line.empty()) {
            return turn(line);
        }
        return true;
    }

private:
    // Runs the generated token that no step has run yet, so the session holds the whole conversation.
    void settle() {
        if (!pending_.empty()) session_.feed(pending_);
        pending_.clear();
    }

    bool turn(const std::string& line) {
        const bool first = session_.n_past() == 0 && pending_.empty();
        ChatTurns::Tokens t = turns_.user_turn(line, first);
        std::vector<int32_t> ids = pending_;
        ids.insert(ids.end(), t.ids.begin(), t.ids.end());
        const size_t start = size_t(session_.n_past()) + pending_.size() + t.turn_offset;
        if (size_t(session_.n_past()) + ids.size() + 1 >= session_.context_length()) {
            if (first)
                throw Error(fmt::format("this turn's {} tokens do not fit the context of {} (raise -c)", ids.size(),
                                        session_.context_length()));
            if (!make_room(ids.size())) return false;
            return turn(line);
        }
        if (first) prefix_len_ = t.turn_offset;
        turn_starts_.push_back(start);

        api::GenerateOptions go;
        go.max_tokens = o_.n_predict;
        go.sampling = o_.sampling;
        go.append = true;
        const int32_t before = session_.n_past();
        g_chat_interrupted.store(false);
        // Ctrl-C cancels the session from a watcher (the handler only sets a flag), also during the prompt.
        std::jthread watcher([this](std::stop_token stop) {
            while (!stop.stop_requested() && !g_chat_interrupted.load())
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            if (g_chat_interrupted.load()) session_.cancel();
        });
        const api::GenerateResult r = session_.generate(std::span<const int32_t>(ids), go, [](std::string_view piece) {
            fmt::print("{}", piece);
            std::fflush(stdout);
            return true;
        });
        watcher.request_stop();
        watcher.join();
        fmt::print("\n");
        std::fflush(stdout);
        // What no step ran (the last generated token, or more after Ctrl-C in the prompt) runs next turn.
        std::vector<int32_t> all = ids;
        all.insert(all.end(), r.tokens.begin(), r.tokens.end());
        pending_.assign(all.begin() + (r.n_past - before), all.end());
        report(r, before);
        if (r.context_full) {
            fmt::print(stderr, "mk: the context of {} tokens is full: the reply stopped\n", session_.context_length());
            return make_room(0);
        }
        return true;
    }

    void report(const api::GenerateResult& r, int32_t before) {
        if (o_.json) {
            nlohmann::json j = {{"n_past_before", before}, {"prompt_tokens", r.n_prompt}, {"prompt_ms", r.prompt_ms},
                                {"generated", r.tokens}, {"eval_steps", r.n_eval_steps}, {"eval_ms", r.eval_ms},
                                {"n_past", r.n_past}, {"stopped_at_end", r.stopped_at_end},
                                {"cancelled", r.cancelled || g_chat_interrupted.load()}, {"context_full", r.context_full}};
            fmt::print(stderr, "{}\n", j.dump());
        } else if (o_.verbose) {
            auto per = [](double ms, int n) { return n ? ms / n : 0.0; };
            auto rate = [](double ms, int n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
            fmt::print(stderr, "mk: prompt eval time = {:10.2f} ms / {:5} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
                       r.prompt_ms, r.n_prompt, per(r.prompt_ms, r.n_prompt), rate(r.prompt_ms, r.n_prompt));
            fmt::print(stderr, "mk:        eval time = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
                       r.eval_ms, r.n_eval_steps, per(r.eval_ms, r.n_eval_steps), rate(r.eval_ms, r.n_eval_steps));
            fmt::print(stderr, "mk:          context = {:10} of {} tokens\n", r.n_past, session_.context_length());
        }
    }

    // The context cannot take the next turn: stop, or keep the system prefix and the newest turns that fill
    // at most half the context and leave room for `need` tokens (dropping at least the oldest turn), and
    // re-run them. The answer is the next input line. Returns false to stop.
    bool make_room(size_t need) {
        fmt::print(stderr, "mk: the context of {} tokens is full. [s]top, or [d]rop the oldest turns and re-run the rest? ",
                   session_.context_length());
        std::string answer;
        if (!std::getline(std::cin, answer) || answer.empty() || (answer[0] != 'd' && answer[0] != 'D')) {
            fmt::print(stderr, "\n");
            return false;
        }
        settle();
        const std::vector<int32_t> all = session_.tokens();
        const size_t budget = session_.context_length() / 2;
        std::vector<int32_t> keep;
        for (size_t k = 1; k < turn_starts_.size(); ++k) {
            const size_t kept = prefix_len_ + (all.size() - turn_starts_[k]);
            if (kept > budget || kept + need + 1 >= session_.context_length()) continue;
            keep.assign(all.begin(), all.begin() + prefix_len_);
            keep.insert(keep.end(), all.begin() + turn_starts_[k], all.end());
            for (size_t& s : turn_starts_) s = s >= turn_starts_[k] ? s - turn_starts_[k] + prefix_len_ : 0;
            turn_starts_.erase(turn_starts_.begin(), turn_starts_.begin() + k);
            break;
        }
        session_.reset();
        if (keep.empty()) {
            turn_starts_.clear();
            fmt::print(stderr, "mk: no turn fits: the conversation starts afresh\n");
        } else {
            fmt::print(stderr, "mk: re-running {} of {} tokens\n", keep.size(), all.size());
            session_.feed(keep);
        }
        return true;
    }

    const ChatCli& o_;
    api::Model model_;
    ChatTurns turns_;
    api::Session session_;
    std::vector<int32_t> pending_;      // generated, not yet run (the next turn runs them first)
    std::vector<size_t> turn_starts_;   // where each user turn begins in the session's tokens
    size_t prefix_len_ = 0;             // the system prefix before the first turn
};

}  // namespace

void register_chat(CLI::App& app) {
    auto o = std::make_shared<ChatCli>();
    CLI::App* cmd = app.add_subcommand("chat", "Chat with the model: each line a turn, the KV cache keeps the history");
    cmd->footer(std::string("Commands:\n") + kHelp);
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec (default: SmolLM2-135M-Instruct)");
    cmd->add_option("--system", o->system, "The system message (default: the template's own)");
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens per reply at most")->check(CLI::Range(1, 1 << 20));
    add_sampling_options(cmd, o->sampling);
    cmd->add_flag("--verbose", o->verbose, "After each reply, its prompt and eval times on stderr (this turn's tokens only)");
    cmd->add_flag("--json", o->json, "After each reply, a JSON line on stderr: token counts, ids, times");
    add_backend_options(cmd, o->backend);
    cmd->callback([o] {
        Chat chat(*o, api::Model::load(o->model));
        const bool interactive = ::isatty(0);
        auto previous = std::signal(SIGINT, on_chat_sigint);
        std::string line;
        while (true) {
            if (interactive) fmt::print("> ");
            std::fflush(stdout);
            if (!std::getline(std::cin, line)) break;
            if (!interactive) fmt::print("> {}\n", line);
            try {
                if (!chat.handle(line)) break;
            } catch (const Error& e) {
                if (!interactive) throw;  // a script stops at its first error (exit 2)
                fmt::print(stderr, "mk: error: {}\n", e.what());
            }
        }
        std::signal(SIGINT, previous);
    });
}

}  // namespace mk::tools

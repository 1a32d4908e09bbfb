// `mk chat` through a pipe against the public API: a second turn runs only its own tokens and its greedy
// reply equals a fresh session's on the same token sequence; /save in one process and /load in another
// continue exactly as one process that never stopped; a full context drops the oldest turns when asked.
// SmolLM2 (its ChatML template); skipped without it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mk/mk.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

namespace {

namespace fs = std::filesystem;

struct Run {
    int status = -1;
    std::string out, err;
    std::vector<nlohmann::json> turns;  // the --json lines on stderr, one per reply
};

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// printf INPUT | mk chat -m MODEL ARGS --json, stdout and stderr to files.
Run chat(const std::string& input, const std::string& args) {
    const fs::path dir = mk::test::output_dir();
    const std::string tag = std::to_string(::getpid());
    const fs::path in = dir / ("chat_in_" + tag), out = dir / ("chat_out_" + tag), err = dir / ("chat_err_" + tag);
    std::ofstream(in) << input;
    const std::string cmd = std::string(MK_CLI_PATH) + " chat -m '" + mk::test::default_model_path().string() + "' " +
                            args + " --json < '" + in.string() + "' > '" + out.string() + "' 2> '" + err.string() + "'";
    Run r;
    r.status = std::system(cmd.c_str());
    r.out = read_file(out);
    r.err = read_file(err);
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
        if (!line.empty() && line[0] == '{') r.turns.push_back(nlohmann::json::parse(line));
    fs::remove(in);
    fs::remove(out);
    fs::remove(err);
    return r;
}

const std::string kArgs = "--temp 0 -n 12 -c 256";

}  // namespace

TEST_CASE("mk chat: the second turn runs only its tokens and equals a fresh session", "[cpu][model][cli]") {
    MK_SKIP_IF_MISSING(mk::test::default_model_path(), "tools/setup.sh");
    const std::string state = (mk::test::output_dir() / ("chat_two_turns_" + std::to_string(::getpid()))).string();
    const Run r = chat("What is the capital of France?\nAnd of Italy?\n/save " + state + "\n", kArgs);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    REQUIRE(r.turns.size() == 2);
    CHECK(r.out.find("> What is the capital of France?\n") == 0);
    CHECK(r.out.find("> And of Italy?\n") != std::string::npos);

    const nlohmann::json& one = r.turns[0];
    const nlohmann::json& two = r.turns[1];
    const int32_t history = two.at("n_past_before");
    const int32_t n_new = two.at("prompt_tokens");
    CHECK(history == one.at("n_past").get<int32_t>());
    CHECK(n_new < 20);  // "<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n"
    CHECK(history > 30);  // the first turn: the default system message, the question and a reply

    // The whole sequence through the API: the saved state's tokens (the last reply token run at /save).
    mk::api::Model model = mk::api::Model::load(mk::test::default_model_path().string());
    mk::api::BackendOptions options;
    options.ctx_len = 256;
    mk::api::Session saved = model.new_session(options);
    saved.load(state);
    fs::remove(state);
    const std::vector<int32_t>& all = saved.tokens();
    REQUIRE(all.size() >= size_t(history + n_new));
    const std::string new_turn = model.detokenize(std::span<const int32_t>(all).subspan(size_t(history), size_t(n_new)));
    CHECK(new_turn.find("And of Italy?") != std::string::npos);
    CHECK(new_turn.find("France") == std::string::npos);

    mk::api::Session fresh = model.new_session(options);
    mk::api::GenerateOptions go;
    go.max_tokens = 12;
    const std::vector<int32_t> prompt(all.begin(), all.begin() + history + n_new);
    const mk::api::GenerateResult again = fresh.generate(std::span<const int32_t>(prompt), go);
    CHECK(again.n_prompt == history + n_new);
    CHECK(again.tokens == two.at("generated").get<std::vector<int32_t>>());
}

TEST_CASE("mk chat: /save, then /load in a new process continues as if never stopped", "[cpu][model][cli]") {
    MK_SKIP_IF_MISSING(mk::test::default_model_path(), "tools/setup.sh");
    const std::string state = (mk::test::output_dir() / ("chat_resume_" + std::to_string(::getpid()))).string();
    const Run whole = chat("Name a color.\nAnd a fruit?\n", kArgs);
    const Run first = chat("Name a color.\n/save " + state + "\n", kArgs);
    const Run second = chat("/load " + state + "\nAnd a fruit?\n", kArgs);
    INFO(whole.out << whole.err << first.out << first.err << second.out << second.err);
    REQUIRE(whole.status == 0);
    REQUIRE(first.status == 0);
    REQUIRE(second.status == 0);
    REQUIRE(whole.turns.size() == 2);
    REQUIRE(second.turns.size() == 1);
    CHECK(second.turns[0].at("generated") == whole.turns[1].at("generated"));
    CHECK(second.turns[0].at("n_past") == whole.turns[1].at("n_past"));

    // A state for another context is refused by name (one line, exit 2).
    const Run refused = chat("/load " + state + "\n", "--temp 0 -n 12 -c 128");
    fs::remove(state);
    CHECK(WEXITSTATUS(refused.status) == 2);
    CHECK(refused.err.find("mk: error: " + state + ": saved with a context of 256 tokens") != std::string::npos);
}

TEST_CASE("mk chat: a full context drops the oldest turns on request and goes on", "[cpu][model][cli]") {
    MK_SKIP_IF_MISSING(mk::test::default_model_path(), "tools/setup.sh");
    // -c 96: the fourth turn does not fit after three; the next line answers the question.
    const Run r = chat("Hi\nWhat is 2+2?\nAnd 3+3?\nAnd 4+4?\nd\nAnd 5+5?\n", "--temp 0 -n 8 -c 96");
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    REQUIRE(r.turns.size() == 5);
    CHECK(r.err.find("mk: the context of 96 tokens is full. [s]top, or [d]rop") != std::string::npos);
    CHECK(r.err.find("mk: re-running ") != std::string::npos);
    const int32_t before_drop = r.turns[2].at("n_past");
    CHECK(r.turns[3].at("n_past_before").get<int32_t>() < before_drop);  // the oldest turns are gone
    CHECK(r.turns[3].at("n_past_before").get<int32_t>() > 0);           // the system prefix and newest turns stay

    // Answered "stop" (or no answer at all): the conversation ends there, exit 0.
    const Run stop = chat("Hi\nWhat is 2+2?\nAnd 3+3?\nAnd 4+4?\n", "--temp 0 -n 8 -c 96");
    CHECK(stop.status == 0);
    CHECK(stop.turns.size() == 3);
}

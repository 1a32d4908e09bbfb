// mk: the command-line tool. Each subcommand lives in its own cmd_*.cpp; this file wires them and
// is the one place that turns an error (mk::Error, CLI11's option errors) into "mk: error: ..." and exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <string>

#include "models/error.hpp"
#include "tools/commands.hpp"

namespace {

// Every failure is one line, "mk: error: ...", and exit code 2 (a message's own line breaks become "; ").
int print_error(std::string message) {
    while (!message.empty() && message.back() == '\n') message.pop_back();
    for (size_t at; (at = message.find('\n')) != std::string::npos;) message.replace(at, 1, "; ");
    fmt::print(stderr, "mk: error: {}\n", message);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mk: a persistent megakernel runtime for low-latency LLM inference.\n"
                 "Compiles a model's forward pass into per-SM instruction streams and runs them\n"
                 "on a resident GPU interpreter or on the CPU backend."};
    app.require_subcommand(1);
    app.set_version_flag("--version", "mk 0.1.0");
    mk::tools::register_generate(app);
    mk::tools::register_chat(app);
    mk::tools::register_bench(app);
    mk::tools::register_schedule(app);
    mk::tools::register_inspect(app);
    mk::tools::register_info(app);
    mk::tools::register_devices(app);
    mk::tools::register_synth(app);
    mk::tools::register_perplexity(app);
    try {
        app.parse(argc, argv);  // runs the selected subcommand's callback
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return print_error(e.what());  // CLI11's own words, in mk's one-line form
    } catch (const mk::Error& e) {
        return print_error(e.what());
    } catch (const std::exception& e) {
        return print_error(std::string("internal error: ") + e.what());
    }
    return 0;
}

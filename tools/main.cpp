// mk: the command-line tool. Each subcommand lives in its own cmd_*.cpp; this file wires them and
// is the one place that turns an mk::Error into "mk: error: ..." and exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <exception>

#include "models/error.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"mk: a persistent megakernel runtime for low-latency LLM inference.\n"
                 "Compiles a model's forward pass into per-SM instruction streams and runs them\n"
                 "on a resident GPU interpreter or on the CPU backend."};
    app.require_subcommand(1);
    app.set_version_flag("--version", "mk 0.1.0");
    mk::tools::register_generate(app);
    mk::tools::register_bench(app);
    mk::tools::register_schedule(app);
    mk::tools::register_inspect(app);
    mk::tools::register_info(app);
    mk::tools::register_devices(app);
    mk::tools::register_synth(app);
    try {
        app.parse(argc, argv);  // runs the selected subcommand's callback
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const mk::Error& e) {
        fmt::print(stderr, "mk: error: {}\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "mk: internal error: {}\n", e.what());
        return 3;
    }
    return 0;
}

// The mk subcommands: each register_* adds its CLI11 subcommand with a callback that runs after parsing.
#pragma once
#include <CLI/CLI.hpp>

namespace mk::tools {

void register_info(CLI::App& app);
void register_synth(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench(CLI::App& app);
void register_schedule(CLI::App& app);
void register_inspect(CLI::App& app);
void register_devices(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_chat(CLI::App& app);

}  // namespace mk::tools

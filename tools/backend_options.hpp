// The options every running command shares (backend, target, policy, schedule file, threads,
// context) as CLI flags, filling the public API's BackendOptions.
#pragma once
#include <CLI/CLI.hpp>

#include "mk/options.hpp"

namespace mk::tools {

using BackendOptions = api::BackendOptions;

void add_backend_options(CLI::App* cmd, BackendOptions& options);

}  // namespace mk::tools

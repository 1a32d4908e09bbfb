// The options every running command shares (backend, target, policy, schedule file, threads,
// context) as CLI flags; runtime/api/backend.hpp turns them into a Program.
#pragma once
#include <CLI/CLI.hpp>

#include "mk/options.hpp"
#include "runtime/api/backend.hpp"

namespace mk::tools {

using BackendOptions = api::BackendOptions;

void add_backend_options(CLI::App* cmd, BackendOptions& options);

}  // namespace mk::tools

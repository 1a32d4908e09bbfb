// The options every running command shares as CLI flags: the backend (target, policy, schedule file,
// threads, context) filling the public API's BackendOptions, and sampling filling its SamplingOptions.
#pragma once
#include <CLI/CLI.hpp>

#include "mk/options.hpp"

namespace mk::tools {

using BackendOptions = api::BackendOptions;

void add_backend_options(CLI::App* cmd, BackendOptions& options);
void add_sampling_options(CLI::App* cmd, api::SamplingOptions& sampling);

}  // namespace mk::tools

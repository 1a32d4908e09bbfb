// The options every running command shares (backend, target, policy, schedule file, threads,
// context) and how they become a Program.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "models/model.hpp"
#include "runtime/program.hpp"
#include "scheduler/schedule.hpp"

namespace mk::tools {

struct BackendOptions {
    std::string backend = "auto";
    std::string target;         // h200 | cpu; default: the backend's own
    uint32_t sms = 0;           // --sms N (with --smem)
    uint64_t smem = 0;
    std::string policy = "critical-path";
    std::string schedule_file;  // a .mks made by `mk schedule`
    uint32_t threads = 0;
    uint32_t ctx = 0;
    bool check_pages = false;
    bool detect_races = false;
};

void add_backend_options(CLI::App* cmd, BackendOptions& options);
// Target from --target / --sms --smem (default: the CPU backend's own target).
Target resolve_target(const BackendOptions& options);
// The schedule from --schedule (checked against the model) or compiled for the target.
Schedule resolve_schedule(const Model& model, const BackendOptions& options);
std::unique_ptr<Program> make_program(const Model& model, const BackendOptions& options);

}  // namespace mk::tools

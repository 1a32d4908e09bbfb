// Backend selection (see backend_options.hpp).
#include "tools/backend_options.hpp"

#include "models/error.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"

namespace mk::tools {

void add_backend_options(CLI::App* cmd, BackendOptions& o) {
    cmd->add_option("--backend", o.backend, "cpu | cuda | auto (auto: cpu; cuda arrives with the GPU backend)")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    cmd->add_option("--target", o.target, "Compile the schedule for this target: h200 | cpu (default cpu)");
    cmd->add_option("--sms", o.sms, "Compile for N SMs (with --smem) instead of a named target");
    cmd->add_option("--smem", o.smem, "Shared memory per SM in bytes (with --sms)");
    cmd->add_option("--policy", o.policy, "Assignment policy: critical-path | round-robin")
        ->check(CLI::IsMember({"critical-path", "round-robin"}));
    cmd->add_option("--schedule", o.schedule_file, "Run this .mks schedule (from `mk schedule`) instead of compiling one");
    cmd->add_option("-t,--threads", o.threads, "CPU worker threads (default: one per core)");
    cmd->add_option("-c,--ctx-size", o.ctx, "Context length in tokens (default: the model's, at most 4096)");
    cmd->add_flag("--check-pages", o.check_pages, "CPU: stage weights through per-SM pages and check the page accounting");
    cmd->add_flag("--detect-races", o.detect_races, "CPU: run the vector-clock race detector (slow)");
}

Target resolve_target(const BackendOptions& o) {
    if (o.sms || o.smem) {
        if (!o.sms || !o.smem) fail("--sms and --smem go together");
        if (!o.target.empty()) fail("give either --target or --sms/--smem, not both");
        return target_custom(o.sms, o.smem);
    }
    return target_by_name(o.target.empty() ? "cpu" : o.target);
}

Schedule resolve_schedule(const Model& model, const BackendOptions& o) {
    if (!o.schedule_file.empty()) {
        if (!o.target.empty() || o.sms) fail("--schedule already fixes the target; drop --target/--sms");
        Schedule s = load_schedule(o.schedule_file);
        if (s.config_hash != model.config.hash())
            fail("{}: compiled for another model (config hash {:016x}; {} has {:016x})", o.schedule_file, s.config_hash,
                 model.path.string(), model.config.hash());
        verify_or_throw(s, o.schedule_file);
        return s;
    }
    return compile_schedule(model.config, weight_formats(model), resolve_target(o), parse_policy(o.policy));
}

std::unique_ptr<Program> make_program(const Model& model, const BackendOptions& o) {
    if (o.backend == "cuda") fail("--backend cuda: this build has no CUDA interpreter yet; use --backend cpu");
    ProgramOptions po;
    po.n_threads = o.threads;
    po.ctx_len = o.ctx;
    po.check_pages = o.check_pages;
    po.detect_races = o.detect_races;
    return make_cpu_program(model, resolve_schedule(model, o), po);
}

}  // namespace mk::tools

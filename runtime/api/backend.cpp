// Backend selection (see backend.hpp).
#include "runtime/api/backend.hpp"

#include "models/error.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"

namespace mk {

Target resolve_target(const api::BackendOptions& o) {
    if (o.sms || o.smem_bytes) {
        if (!o.sms || !o.smem_bytes) fail("--sms and --smem go together");
        if (!o.target.empty()) fail("give either --target or --sms/--smem, not both");
        return target_custom(o.sms, o.smem_bytes);
    }
    return target_by_name(o.target.empty() ? "cpu" : o.target);
}

void check_schedule_for(const Model& model, const Schedule& s, const std::string& name) {
    if (s.config_hash != model.config.hash())
        fail("{}: compiled for another model (config hash {:016x}; {} has {:016x})", name, s.config_hash,
             model.path.string(), model.config.hash());
}

Schedule resolve_schedule(const Model& model, const api::BackendOptions& o) {
    if (!o.schedule_file.empty()) {
        if (!o.target.empty() || o.sms) fail("--schedule already fixes the target; drop --target/--sms");
        Schedule s = load_schedule(o.schedule_file);
        check_schedule_for(model, s, o.schedule_file);
        verify_or_throw(s, o.schedule_file);
        return s;
    }
    return compile_schedule(model.config, weight_formats(model), resolve_target(o), parse_policy(o.policy));
}

std::unique_ptr<Program> make_program(const Model& model, Schedule schedule, const api::BackendOptions& o) {
    if (o.backend == "cuda") fail("--backend cuda: this build has no CUDA interpreter yet; use --backend cpu");
    if (o.backend != "cpu" && o.backend != "auto") fail("unknown backend '{}': cpu | cuda | auto", o.backend);
    ProgramOptions po;
    po.n_threads = o.threads;
    po.ctx_len = o.ctx_len;
    po.check_pages = o.check_pages;
    po.detect_races = o.detect_races;
    return make_cpu_program(model, std::move(schedule), po);
}

std::unique_ptr<Program> make_program(const Model& model, const api::BackendOptions& o) {
    return make_program(model, resolve_schedule(model, o), o);
}

}  // namespace mk

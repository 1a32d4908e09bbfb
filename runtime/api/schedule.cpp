// mk::api::Schedule (see mk/schedule.hpp): .mks files, inspection and simulation of a compiled step.
#include "mk/schedule.hpp"

#include "runtime/api/impl.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/simulate.hpp"
#include "scheduler/verify.hpp"

namespace mk::api {

Schedule::Schedule(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Schedule Schedule::load(const std::string& path) {
    return guard(path.c_str(), [&] {
        auto impl = std::make_shared<Impl>();
        impl->schedule = load_schedule(path);
        verify_or_throw(impl->schedule, path);
        return Schedule(std::move(impl));
    });
}

void Schedule::save(const std::string& path) const {
    guard(path.c_str(), [&] { save_schedule(impl_->schedule, path); });
}

ScheduleInfo Schedule::info() const {
    const mk::Schedule& s = impl_->schedule;
    ScheduleInfo info;
    info.target = s.target.name;
    info.policy = s.policy;
    info.n_sms = uint32_t(s.streams.size());
    info.tp = s.tp_size;
    info.n_instructions = s.n_instructions();
    info.n_counters = s.counters.size();
    info.arena_bytes = s.arena_bytes;
    info.config_hash = s.config_hash;
    return info;
}

ScheduleSimulation Schedule::simulate(uint32_t position) const {
    return guard("simulate", [&] {
        SimOptions options;
        options.position = position;
        Simulation sim = mk::simulate(impl_->schedule, options);
        return ScheduleSimulation{sim.makespan_ns / 1e3, sim.weight_gbs()};
    });
}

std::string Schedule::to_json() const {
    return guard("schedule JSON", [&] { return schedule_to_json(impl_->schedule); });
}

std::string Schedule::verify_summary() const {
    return guard("verify", [&] { return verify(impl_->schedule).summary(); });
}

}  // namespace mk::api

// mk schedule: compile a model's decode step (or with --prefill T its prefill step) for a target, verify it and
// write it as .mks (and JSON).
// A synthetic spec compiles from its shape alone, so shapes too big to write (llama-3.1-70b) schedule too.
#include <fmt/core.h>

#include <chrono>
#include <fstream>

#include "models/error.hpp"
#include "models/synthetic.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/device_calibration.hpp"
#include "scheduler/device_cost.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/simulate.hpp"
#include "scheduler/verify.hpp"
#include "runtime/backend.hpp"
#include "runtime/model_source.hpp"
#include "tools/backend_options.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

void register_schedule(CLI::App& app) {
    struct Options {
        std::string model, out, json;
        BackendOptions backend;
        uint32_t prefill = 0;
        bool all_logits = false;
        std::string calibration;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("schedule", "Compile a model's decode (or prefill) step into per-SM instruction streams (.mks)");
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec (default: SmolLM2-135M-Instruct)");
    cmd->add_option("-o,--output", o->out, "The .mks file to write")->required();
    cmd->add_option("--json", o->json, "Also write the schedule as JSON to this file");
    cmd->add_option("--target", o->backend.target, "h200 | cpu (default cpu)");
    cmd->add_option("--backend", o->backend.backend,
                    "The backend the schedule is for: cpu | cuda | cuda-kernels (cuda pads weight rows to 16 bytes) | "
                    "cuda-emu, cuda-kernels-emu (the same schedules as cuda's, in any build)")
        ->check(CLI::IsMember({"cpu", "cuda", "cuda-kernels", "cuda-emu", "cuda-kernels-emu", "auto"}));
    cmd->add_option("--sms", o->backend.sms, "Compile for N SMs (with --smem) instead of a named target");
    cmd->add_option("--smem", o->backend.smem_bytes, "Shared memory per SM in bytes (with --sms)");
    cmd->add_option("--policy", o->backend.policy, "critical-path | round-robin")
        ->check(CLI::IsMember({"critical-path", "round-robin"}));
    cmd->add_option("--tp", o->backend.tp,
                    "Tensor-parallel ranks: one combined schedule of N ranks of the target's SMs each, exchanging "
                    "partial results with transfer instructions")
        ->check(CLI::Range(1u, 64u));
    cmd->add_option("--tp-loopback", o->backend.tp_loopback,
                    "cuda: N ranks sharing one GPU (each rank gets 1/N of its SMs)")
        ->check(CLI::Range(1u, 64u));
    cmd->add_option("--prefill", o->prefill,
                    "Compile the prefill step for chunks of T prompt tokens instead of the decode step (with --tp split "
                    "across the ranks as the decode step is; the CUDA backends take chunks up to what each SM's "
                    "scratch holds, about max(d_model + 960, 3776) tokens)")
        ->check(CLI::Range(1u, 4096u));
    cmd->add_flag("--all-logits", o->all_logits, "With --prefill: the logits of every token of the chunk, not only the last");
    cmd->add_option("--kv-type", o->backend.kv_type, "How the KV cache stores K and V: f32 (default) | bf16")
        ->check(CLI::IsMember({"f32", "bf16"}));
    cmd->add_option("--calibration", o->calibration,
                    "Price the device cost model's prediction with the constants measured into this file (mk devices "
                    "--calibrate) instead of the assumed ones");
    cmd->callback([o] {
        const Target target = resolve_target(o->backend);
        if (!o->calibration.empty() && target.name == "cpu")
            fail("--calibration {}: prices the device cost model, which target cpu does not use", o->calibration);
        const uint32_t tp = resolve_tp(o->backend);
        ModelConfig config;
        std::vector<WeightFormat> formats;
        if (is_synthetic_spec(o->model)) {  // the shape is enough: no weights are written
            const SyntheticSpec spec = parse_synthetic_spec(o->model);
            config = synthetic_config(spec);
            formats = backend_weight_formats(synthetic_weight_formats(spec), config, o->backend);
        } else {
            const Model model = open_model(o->model);
            config = model.config;
            formats = backend_weight_formats(model, o->backend);
        }
        const auto t0 = std::chrono::steady_clock::now();
        if (o->all_logits && !o->prefill) fail("--all-logits goes with --prefill T");
        const KvType kv_type = resolve_kv_type(o->backend);
        Schedule s = o->prefill ? compile_prefill_schedule(config, formats, target, parse_policy(o->backend.policy),
                                                           o->prefill, o->all_logits, kv_type, tp)
                                : compile_schedule(config, formats, target, parse_policy(o->backend.policy), tp, kv_type);
        const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        check_prefill_fits_backend(s, o->backend);
        VerifyReport report = verify(s);
        if (!report.ok) fail("{}: the compiled schedule failed verification: {}", o->out, report.summary());
        save_schedule(s, o->out);
        if (!o->json.empty()) {
            std::ofstream out(o->json);
            out << schedule_to_json(s);
            if (!out) fail("{}: cannot write", o->json);
        }
        Simulation sim = simulate(s);
        const std::string sms = s.tp_size > 1 ? fmt::format("{} ranks x {} SMs", s.tp_size, target.n_sms)
                                              : fmt::format("{} SMs", s.streams.size());
        const std::string peak = s.tp_size > 1 ? fmt::format("{} x {:.0f}", s.tp_size, target.bandwidth_gbs)
                                               : fmt::format("{:.0f}", target.bandwidth_gbs);
        const std::string step = s.prefill_tokens ? fmt::format("prefill step of {} tokens", s.prefill_tokens) : "decode step";
        fmt::print("{}: {}, {} instructions on {} ({}), {} counters, policy {}, {} KV cache\n", o->out, step,
                   s.n_instructions(), sms, target.name, s.counters.size(), s.policy, kv_type_name(s.dims.kv_type));
        fmt::print("compiled in {:.1f} ms, verified in {:.1f} ms: {}\n", compile_ms, report.stats.elapsed_ms,
                   report.ok ? "ok" : "failed");
        fmt::print("predicted step time {:.1f} us ({:.0f} GB/s of weights at {} GB/s peak; ideal model)\n",
                   sim.makespan_ns / 1e3, sim.weight_gbs(), peak);
        if (target.name != "cpu") {  // what `mk inspect` shows by default for a GPU target
            // The calibration's constants price this prediction only (the schedule is compiled as assumed).
            Schedule priced = s;
            std::string calibration_report;
            const DeviceModel device = calibrated_device_model(o->calibration, priced.target, calibration_report);
            fmt::print("{}", calibration_report);
            SimOptions so;
            so.device = &device;
            const Simulation dev = simulate(priced, so);
            fmt::print("device cost model ({}) at position {}: step {:.1f} us + boundary {:.1f} us = {} ({:.0f} GB/s "
                       "of weights; mk inspect for the breakdown)\n",
                       device.name, so.position, dev.makespan_ns / 1e3, dev.step_boundary_ns / 1e3,
                       step_time_summary(dev.token_ns(), s.prefill_tokens), dev.weight_gbs());
        }
    });
}

}  // namespace mk::tools

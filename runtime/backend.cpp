// Backend selection (see backend.hpp).
#include "runtime/backend.hpp"

#include <optional>

#include "instructions/registry.hpp"
#include "models/error.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "runtime/emu/emu_program.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"
#if MK_HAVE_CUDA
#include "runtime/cuda/cuda_program.hpp"
#include "runtime/cuda/device_state.hpp"
#endif

namespace mk {

namespace {
// cuda-emu and cuda-kernels-emu: the same CUDA backends run by the CUDA emulator (runtime/emu), built everywhere.
bool is_emulated(const std::string& backend) { return backend == "cuda-emu" || backend == "cuda-kernels-emu"; }
bool is_cuda_backend(const std::string& backend) {
    return backend == "cuda" || backend == "cuda-kernels" || is_emulated(backend);
}

// auto stays on the CPU until the CUDA backend has been verified on a device (tools/gpu-check.sh).
std::string resolve_backend(const api::BackendOptions& o) {
    if (o.backend == "auto" || o.backend.empty()) return "cpu";
    if (o.backend != "cpu" && !is_cuda_backend(o.backend))
        fail("unknown backend '{}': cpu | cuda | cuda-kernels | cuda-emu | cuda-kernels-emu | auto", o.backend);
#if !MK_HAVE_CUDA
    if (is_cuda_backend(o.backend) && !is_emulated(o.backend)) fail("--backend {}: this mk was built without CUDA; use --backend cpu", o.backend);
#endif
    return o.backend;
}
}  // namespace

void check_prefill_fits_backend(const Schedule& prefill, const api::BackendOptions& o) {
    if (!prefill.prefill_tokens || !is_cuda_backend(resolve_backend(o))) return;
    if (const uint32_t fits = device_prefill_limit(prefill); prefill.prefill_tokens > fits)
        fail("--prefill {}: the CUDA backends run chunks of at most {} tokens of this model{} (each SM's scratch holds "
             "the chunk's vectors); compile --prefill {} or less",
             prefill.prefill_tokens, fits, prefill.dims.kv_type == uint32_t(KvType::bf16) ? " with a bf16 KV cache" : "",
             fits);
}

uint32_t resolve_tp(const api::BackendOptions& o) {
    if (o.tp_loopback) {
        if (!is_cuda_backend(resolve_backend(o)))
            fail("--tp-loopback {} shares one GPU between the ranks: it needs --backend cuda or cuda-kernels (the cpu "
                 "backend emulates ranks with --tp {})", o.tp_loopback, o.tp_loopback);
        if (o.tp != 1 && o.tp != o.tp_loopback) fail("--tp {} and --tp-loopback {} disagree", o.tp, o.tp_loopback);
        return o.tp_loopback;
    }
    return o.tp == 0 ? 1 : o.tp;
}

Target resolve_target(const api::BackendOptions& o) {
    if (o.sms || o.smem_bytes) {
        if (!o.sms || !o.smem_bytes) fail("--sms and --smem go together");
        if (!o.target.empty()) fail("give either --target or --sms/--smem, not both");
        return target_custom(o.sms, o.smem_bytes);
    }
    if (!o.target.empty()) return target_by_name(o.target);
    if (is_emulated(resolve_backend(o))) return target_device(kEmuDefaultSms, kEmuSmemOptin);
#if MK_HAVE_CUDA
    if (is_cuda_backend(resolve_backend(o))) {
        const DeviceInfo device = current_device();
        // Loopback: each rank gets its share of the SMs; on separate GPUs each rank has a whole one.
        const uint32_t ranks = o.tp_loopback ? resolve_tp(o) : 1;
        if (device.sm_count < ranks)
            fail("--tp-loopback {}: {} has only {} SMs", ranks, device.name, device.sm_count);
        return target_device(device.sm_count / ranks, device.smem_optin);
    }
#endif
    return target_cpu();
}

void check_schedule_for(const Model& model, const Schedule& s, const std::string& name) {
    if (s.config_hash != model.config.hash())
        fail("{}: compiled for another model (config hash {:016x}; {} has {:016x})", name, s.config_hash,
             model.path.string(), model.config.hash());
}

std::vector<WeightFormat> backend_weight_formats(std::vector<WeightFormat> formats, const ModelConfig& config,
                                                const api::BackendOptions& o) {
    if (const uint32_t tp = resolve_tp(o); tp > 1) formats = tp_weight_formats(formats, model_dims(config), tp);
    // The CUDA backends stream 16-byte-aligned rows (bind_weights pads the model's rows to match).
    if (is_cuda_backend(resolve_backend(o))) formats = padded_row_formats(std::move(formats), kDeviceRowAlign);
    return formats;
}

std::vector<WeightFormat> backend_weight_formats(const Model& model, const api::BackendOptions& o) {
    return backend_weight_formats(weight_formats(model), model.config, o);
}

KvType resolve_kv_type(const api::BackendOptions& o) {
    if (o.kv_type.empty() || o.kv_type == "f32") return KvType::f32;
    if (o.kv_type == "bf16") return KvType::bf16;
    fail("--kv-type {}: expected f32 or bf16", o.kv_type);
}

Schedule resolve_schedule(const Model& model, const api::BackendOptions& o) {
    if (!o.schedule_file.empty()) {
        if (!o.target.empty() || o.sms) fail("--schedule already fixes the target; drop --target/--sms");
        Schedule s = load_schedule(o.schedule_file);
        check_schedule_for(model, s, o.schedule_file);
        if (!o.kv_type.empty() && uint32_t(resolve_kv_type(o)) != s.dims.kv_type)
            fail("{}: compiled for a {} KV cache, not the --kv-type {} asked for", o.schedule_file,
                 kv_type_name(s.dims.kv_type), o.kv_type);
        if (const uint32_t tp = resolve_tp(o); tp > 1 && tp != s.tp_size)
            fail("{}: compiled for {} tensor-parallel rank(s), not the --tp {} asked for", o.schedule_file, s.tp_size, tp);
        verify_or_throw(s, o.schedule_file);
        return s;
    }
    return compile_schedule(model.config, backend_weight_formats(model, o), resolve_target(o), parse_policy(o.policy),
                            resolve_tp(o), resolve_kv_type(o));
}

namespace {
void check_device_code(const Schedule& schedule, const std::string& backend) {
    for (const auto& stream : schedule.streams)
        for (const Instruction& ins : stream)
            if (!has_device_code(ins.opcode))
                fail("--backend {}: the schedule holds {}, which has no CUDA implementation yet", backend,
                     op_info(ins.opcode).name);
}
}  // namespace

std::unique_ptr<Program> make_program(const Model& model, Schedule schedule, const api::BackendOptions& o) {
    const std::string backend = resolve_backend(o);
    if (is_cuda_backend(backend) && schedule.prefill_tokens)
        fail("--backend {}: the schedule is a prefill step (chunks of {} tokens); the CUDA backends step a decode "
             "schedule and compile the prefill step beside it (-b/--batch)", backend, schedule.prefill_tokens);
    // Prompts run in chunks of `batch` tokens through a prefill schedule for the same target, weight formats, ranks
    // and KV type (the CUDA backends' ranks too, on one GPU with --tp-loopback or one rank per GPU).
    auto compile_prefill = [&](uint32_t chunk) {
        return compile_prefill_schedule(model.config, schedule.weights, schedule.target, parse_policy(o.policy), chunk,
                                        o.all_logits, KvType(schedule.dims.kv_type), schedule.tp_size);
    };
    if (schedule.tp_size > 1 && !o.tp_loopback && (backend == "cuda-kernels" || backend == "cuda-kernels-emu"))
        fail("--tp {} --backend {}: the kernel-per-op baseline runs tensor parallel only on one GPU; use --tp-loopback {}",
             schedule.tp_size, backend, schedule.tp_size);
    std::optional<Schedule> prefill;
    if (o.batch == 0) fail("--batch 0: a prompt chunk holds at least 1 token");
    if (o.batch > 1) prefill = compile_prefill(o.batch);
    if (is_cuda_backend(backend)) {
        check_device_code(schedule, backend);
        // A chunk past what the device's scratch holds (device_prefill_limit) runs as the largest that fits (with a
        // bf16 KV cache that can be far below -b's default).
        if (const uint32_t fits = prefill ? device_prefill_limit(*prefill) : 0; prefill && prefill->prefill_tokens > fits)
            prefill = fits > 1 ? std::optional(compile_prefill(fits)) : std::nullopt;
        if (prefill) check_device_code(*prefill, backend);
    }
    if (is_emulated(backend)) {
        CudaEmuOptions eo;
        eo.ctx_len = o.ctx_len;
        eo.stepwise = o.stepwise;
        eo.kernels = backend == "cuda-kernels-emu";
        eo.graph = o.graph;
        eo.separate_gpus = schedule.tp_size > 1 && !o.tp_loopback;
        eo.watchdog_ms = o.watchdog_ms;
        eo.trace_file = o.trace_file;
        return make_cuda_emu_program(model, std::move(schedule), eo, std::move(prefill));
    }
#if MK_HAVE_CUDA
    if (backend == "cuda") {
        CudaProgramOptions co;
        co.ctx_len = o.ctx_len;
        co.stepwise = o.stepwise;
        co.separate_gpus = schedule.tp_size > 1 && !o.tp_loopback;
        co.watchdog_ms = o.watchdog_ms;
        co.trace_file = o.trace_file;
        return make_cuda_program(model, std::move(schedule), co, std::move(prefill));
    }
    if (backend == "cuda-kernels") {
        CudaKernelsOptions ko;
        ko.ctx_len = o.ctx_len;
        ko.graph = o.graph;
        ko.watchdog_ms = o.watchdog_ms;
        return make_cuda_kernels_program(model, std::move(schedule), ko, std::move(prefill));
    }
#endif
    if (o.stepwise || o.graph || !o.trace_file.empty())
        fail("--stepwise, --graph and --trace are for the CUDA backends (--backend cuda | cuda-kernels)");
    ProgramOptions po;
    po.n_threads = o.threads;
    po.ctx_len = o.ctx_len;
    po.check_pages = o.check_pages;
    po.detect_races = o.detect_races;
    if (o.cpu_dots != "exact" && o.cpu_dots != "q16")
        fail("--cpu-dots {}: expected exact (fp32 activations) or q16 (16-bit activation blocks)", o.cpu_dots);
    po.dots = o.cpu_dots == "exact" ? CpuDots::exact : CpuDots::q16;
    return make_cpu_program(model, std::move(schedule), po, std::move(prefill));
}

std::unique_ptr<Program> make_program(const Model& model, const api::BackendOptions& o) {
    return make_program(model, resolve_schedule(model, o), o);
}

}  // namespace mk

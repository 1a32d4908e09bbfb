// From BackendOptions to a running Program: the target, the schedule (compiled, or loaded from a .mks
// and checked against the model) and the backend. Shared by the API and the CLI.
#pragma once
#include <memory>

#include "mk/options.hpp"
#include "models/model.hpp"
#include "runtime/program.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

// Tensor-parallel ranks from tp / tp_loopback; throws for combinations no backend runs.
uint32_t resolve_tp(const api::BackendOptions& options);
// Target (per rank) from target / sms+smem_bytes (default: the CPU backend's own target).
Target resolve_target(const api::BackendOptions& options);
// The KV-cache type asked for ("" -> f32); throws naming an unknown one.
KvType resolve_kv_type(const api::BackendOptions& options);
// The weight formats a schedule for this backend is compiled against (sliced for --tp, rows padded for CUDA).
std::vector<WeightFormat> backend_weight_formats(const Model& model, const api::BackendOptions& options);
// The same from a model's formats alone (weight_formats, or synthetic_weight_formats for a shape too big to write).
std::vector<WeightFormat> backend_weight_formats(std::vector<WeightFormat> model_formats, const ModelConfig& config,
                                                const api::BackendOptions& options);
// Throws when `prefill` is a prefill schedule for a CUDA backend whose chunk is longer than those backends run
// (device_prefill_limit: the chunk's vectors live in each SM's scratch); nothing for other schedules and backends.
void check_prefill_fits_backend(const Schedule& prefill, const api::BackendOptions& options);
// The schedule from schedule_file (checked against the model and verified) or compiled for the target.
Schedule resolve_schedule(const Model& model, const api::BackendOptions& options);
// Throws when `schedule` was compiled for another model configuration.
void check_schedule_for(const Model& model, const Schedule& schedule, const std::string& name);
std::unique_ptr<Program> make_program(const Model& model, Schedule schedule, const api::BackendOptions& options);
std::unique_ptr<Program> make_program(const Model& model, const api::BackendOptions& options);

}  // namespace mk

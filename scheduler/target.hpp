// What a schedule is compiled for: the number of SMs (streams) per rank, each SM's shared memory split
// into pages, and the cost-model constants the list scheduler and the simulator use.
#pragma once
#include <cstdint>
#include <string>

#include "instructions/op_types.hpp"

namespace mk {

struct Target {
    std::string name = "custom";
    uint32_t n_sms = 1;
    uint64_t smem_bytes = 0;        // usable shared memory per SM
    uint64_t page_bytes = 16384;
    uint32_t n_pages = 0;           // pages per SM
    double bandwidth_gbs = 100.0;   // whole-device memory bandwidth, GB/s
    double sm_gflops = 10.0;        // per-SM fp32 throughput, GFLOP/s
    double hop_ns = 1000.0;         // latency of a cross-SM dependency (signal -> waiter sees it)
    double instruction_ns = 200.0;  // fixed cost of decoding and starting an instruction
    // Tensor parallel: the link between two ranks (NVLink between GPUs).
    double link_gbs = 450.0;        // one direction, GB/s
    double link_ns = 1500.0;        // a remote signal's latency (write, fence, flag seen by the peer)
    // 1: the prefill ops stream BF16, F16, Q8_0, Q4_0 and Q4_1 weights in MMA tiles for tensor cores (page_plan.hpp); 0 (the CPU's own
    // target): whole rows, as its tile kernels take them.
    uint32_t tensor_cores = 1;
};

// What the ops' page plans are made from on this target (every instruction's page_plan, wherever it is made).
inline PlanInputs plan_inputs(const Target& t, const WeightFormat* weights) {
    return {weights, t.page_bytes, t.n_pages, t.tensor_cores != 0};
}

// The lent H200: 132 SMs, 227 KiB opt-in shared memory, ~4.3 TB/s measured copy bandwidth.
Target target_h200();
// A CUDA device's own target: the H200's cost constants with the device's SM count and opt-in shared memory.
Target target_device(uint32_t n_sms, uint64_t smem_bytes);
// The CPU backend's own target: a few virtual SMs with large pages.
Target target_cpu();
// --sms N --smem BYTES: pages of the default size; throws mk::Error if not even one page fits.
Target target_custom(uint32_t n_sms, uint64_t smem_bytes);
// "h200" | "cpu"; throws naming the unknown target.
Target target_by_name(const std::string& name);

}  // namespace mk

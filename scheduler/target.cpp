// Built-in targets. Each cost constant says where its value comes from; "assumed until measured" marks
// the guesses the simulator runs on until tools/gpu-check.sh (or a CPU bench) measures them.
#include "scheduler/target.hpp"

#include "models/error.hpp"

namespace mk {

namespace {
// Reserve one page's worth of shared memory for the controller's instruction queue and scratch.
uint32_t pages_for(uint64_t smem_bytes, uint64_t page_bytes) {
    return smem_bytes > page_bytes ? uint32_t(smem_bytes / page_bytes) - 1 : 0;
}
}  // namespace

Target target_h200() {
    Target t;
    t.name = "h200";
    t.n_sms = 132;
    t.smem_bytes = 232448;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90
    t.page_bytes = 16384;   // a design choice: 14 fit the opt-in shared memory, 13 after pages_for
    t.n_pages = pages_for(t.smem_bytes, t.page_bytes);
    t.bandwidth_gbs = 4300.0;  // the device-to-device copy rate measured on the lent H200s
    t.sm_gflops = 500.0;       // H100/H200 SXM datasheet: 67 TFLOPS fp32 (non-tensor) / 132 SMs
    t.hop_ns = 700.0;          // assumed until measured: a counter release on one SM seen by another
    t.instruction_ns = 150.0;  // assumed until measured: fetch, decode and the waits' acquire loads
    t.link_gbs = 450.0;  // NVLink 4: 18 links x 25 GB/s each way
    t.link_ns = 1500.0;  // assumed until measured: a peer store, a system-scope fence and the flag, seen ~1.5 us later
    return t;
}

Target target_device(uint32_t n_sms, uint64_t smem_bytes) {
    Target t = target_h200();
    t.name = "device";
    t.n_sms = n_sms;
    t.smem_bytes = smem_bytes;
    t.n_pages = pages_for(smem_bytes, t.page_bytes);
    if (t.n_pages == 0) fail("the device's {} bytes of shared memory per SM hold no {}-byte page", smem_bytes, t.page_bytes);
    return t;
}

Target target_cpu() {
    Target t;
    t.name = "cpu";
    t.n_sms = 8;               // a design choice: a few virtual SMs per core keeps every thread busy
    t.smem_bytes = 4u << 20;   // a design choice: the CPU has no shared-memory limit
    // 256 KiB tiles (120 Q8_0 rows of 2,048): the prefill tile kernel's per-tile work (decode, scales) spread over
    // more rows; Llama-3.2-1B Q8_0 pp64 67.7 -> 70.3 t/s over 64 KiB pages, decode unchanged (bench/RESULTS.md).
    t.page_bytes = 262144;
    t.n_pages = pages_for(t.smem_bytes, t.page_bytes);
    t.bandwidth_gbs = 20.0;    // mk_dot_bench: Q4_1 integer dots from DRAM on one core, 17-21 GB/s (bench/RESULTS.md)
    t.sm_gflops = 20.0;        // assumed until measured
    t.hop_ns = 2000.0;         // assumed until measured: a parked virtual SM woken by another thread
    t.instruction_ns = 300.0;  // assumed until measured
    t.link_gbs = 20.0;  // ranks emulated in one process: a copy in memory
    t.link_ns = t.hop_ns;
    t.tensor_cores = 0;
    return t;
}

Target target_custom(uint32_t n_sms, uint64_t smem_bytes) {
    if (n_sms == 0 || n_sms > 4096) fail("target: --sms {} is outside 1..4096", n_sms);
    Target t = target_h200();
    t.name = "custom";
    t.n_sms = n_sms;
    t.smem_bytes = smem_bytes;
    t.n_pages = pages_for(smem_bytes, t.page_bytes);
    if (t.n_pages == 0)
        fail("target: {} bytes of shared memory hold no {}-byte page besides the controller's", smem_bytes, t.page_bytes);
    return t;
}

Target target_by_name(const std::string& name) {
    if (name == "h200") return target_h200();
    if (name == "cpu") return target_cpu();
    fail("unknown target '{}' (known: h200, cpu; or give --sms N --smem BYTES)", name);
}

}  // namespace mk

// Configuration and reports of the CUDA emulator (runtime/emu): how many devices and SMs it models,
// the seed of its one scheduler, and the report of the last fault it found (deadlock, broken rule).
#pragma once
#include <cstdint>
#include <string>

namespace mk_emu {

struct Config {
    uint32_t n_devices = 1;
    uint32_t n_sms = 132;                     // per device (an H200 has 132)
    uint64_t smem_per_block_optin = 232448;   // 227 KiB: the largest dynamic shared memory a kernel may opt in to
    uint64_t smem_per_sm = 233472;            // 228 KiB, of which 1 KiB is reserved per resident block
    uint32_t max_threads_per_sm = 2048;
    uint32_t max_blocks_per_sm = 32;
    uint64_t global_bytes = 8ull << 30;       // what cudaMemGetInfo reports free
    uint64_t seed = 1;                        // fixes every scheduling decision
    uint32_t preempt_per_256 = 16;            // chance (of 256) that an atomic or fence switches threads
    uint32_t land_per_256 = 24;               // chance (of 256) per decision that a pending bulk copy lands
    uint64_t spin_limit_ns = 10'000'000'000;  // virtual time without progress that is reported as a deadlock
    uint32_t stack_bytes = 256 * 1024;        // per device thread (fiber)
    // Device threads alive at once on a device, whatever the SMs would hold: each fiber is two memory mappings
    // and Linux allows a process 65530 (vm.max_map_count), so 132 full SMs (270k threads) cannot all be fibers.
    uint32_t max_live_threads = 16384;
};

// Replaces the configuration; resets every device (no kernel may be running).
void configure(const Config& config);
const Config& config();
// The last fault's report ("" if none): what a failed launch's error string also carries.
std::string last_report();
// Scheduling decisions taken so far (all devices): how much work the emulation did.
uint64_t decisions();
// Kernels launched with programmatic stream serialization (all devices), and how many of them started while
// the kernel before them still ran (every block of it had run griddepcontrol.launch_dependents).
struct ProgrammaticLaunches {
    uint64_t launched = 0, started_early = 0;
};
ProgrammaticLaunches programmatic_launches();
// The emulated devices' virtual clock (ns; the furthest any device has advanced): what `%globaltimer`
// reads on the device and what the host's bounds on a kernel are measured on, so both agree.
uint64_t virtual_now_ns();

}  // namespace mk_emu

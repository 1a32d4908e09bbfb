// The host's side of the interpreter's mailbox protocol (control.hpp), over a DeviceApi: posting
// commands, draining the token ring, and every wait on the kernels bounded — a stuck kernel is aborted
// and reported, one that ignores the abort leaves the program "wedged" (an error, never a hang; its
// memory is then leaked rather than freed under a running kernel). Plain C++, so the CPU tests run it
// against a fake device and the emulator against its emulated one; MegakernelProgram owns the CUDA
// resources it points at.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/control.hpp"
#include "runtime/cuda/device_api.hpp"
#include "runtime/program.hpp"

namespace mk {

// One kernel (one GPU's share of the program) as the host sees it.
struct KernelLink {
    int device = 0;
    uint32_t first_rank = 0;             // the rank its block 0 runs (fault reports name block + rank)
    void* stream = nullptr;              // the cudaStream_t it runs on
    Mailbox* mailbox = nullptr;          // host view of its pinned mailbox
    int32_t* tokens = nullptr;           // host view of its input-token buffer (max_tokens long)
    const int32_t* device_tokens = nullptr;  // the same buffer as the kernel addresses it
    uint32_t max_tokens = 0;
    const Schedule* schedule = nullptr;  // names the stalled instruction in a fault report
};

struct KernelHostOptions {
    bool resident = true;       // a kernel that serves commands (else one launch per command)
    uint32_t watchdog_ms = 2000;  // the device's bound on one wait
    std::string name;           // how a refused program names this one
    std::vector<int> devices;   // claimed (DeviceClaim: resident, or shared when stepwise) for its life
};

class KernelHost {
public:
    // Claims the devices first: throws, naming the holder, where another program's claim refuses this one.
    KernelHost(DeviceApi& api, KernelHostOptions options);
    ~KernelHost();  // a resident kernel still running is told to exit, then aborted (bounded)
    KernelHost(const KernelHost&) = delete;
    KernelHost& operator=(const KernelHost&) = delete;

    void add(const KernelLink& link);
    const std::vector<KernelLink>& links() const { return links_; }

    // Host bounds, from the device's watchdog: no answer for `answer_limit_ns` aborts the kernels;
    // after an abort they must end within `abort_grace_ns`.
    uint64_t answer_limit_ns() const;
    uint64_t abort_grace_ns() const;

    // A command for steps [0, n_steps) from the current position and epoch; `inputs` (the prompt tokens)
    // are copied into every kernel's token buffer.
    Command command(uint32_t n_steps, std::span<const int32_t> inputs);
    // Resident: posts c and waits until every kernel finished it, calling progress(steps_done) as
    // tokens arrive and asking the device to stop after the running step when *cancel turns true.
    // Stepwise (the caller launched c already): waits, bounded, for the launches to end. Throws on a
    // fault, a dead kernel or no answer; afterwards the position and epoch follow the steps done.
    void run(const Command& c, const std::function<bool(uint32_t)>& progress = {},
             const std::atomic<bool>* cancel = nullptr);
    // A launch of the caller's own that serves no command (a prefill chunk, run while no resident kernel does):
    // waits for it to end, bounded as a stepwise launch; afterwards the position is n_positions further on (the
    // epoch is the caller's: a prefill step has counters of its own). Throws as run() does.
    void run_launched(uint32_t n_positions);
    // The resident loop: the prompt and up to n_new tokens in one command (see Program::run_generation).
    DeviceLoopResult generate(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stop_tokens,
                              const std::function<bool(int32_t)>& on_token, const std::atomic<bool>* cancel);
    // The token the last single-step command sampled (ring slot 0).
    int32_t last_token() const;

    // Tells every kernel to end (exit, then the abort) and waits, bounded; false when one did not end.
    bool shutdown();
    // Aborts and waits, bounded, for every kernel to end (after a fault, before a relaunch).
    void abort_and_wait();

    uint64_t now_ns() { return api_.now_ns(); }  // the clock generate() reports in (the emulator's: virtual)
    uint32_t next_pos() const { return next_pos_; }
    uint32_t epoch() const { return epoch_; }
    void reset_position() { next_pos_ = 0; }
    void reset_after_relaunch();  // counters and control were zeroed: epochs start over
    bool running() const { return running_; }
    void set_running(bool running) { running_ = running; }
    bool broken() const { return broken_; }     // a fault ended the kernels: relaunch before the next command
    bool wedged() const { return wedged_; }     // a kernel ignored the abort: the device is lost to this program
    uint32_t seq() const { return seq_; }

private:
    void post(const Command& c);
    void wait_launched();
    void abort_all();
    void send_cancel();
    bool any_fault() const;
    std::vector<StreamRef> streams() const;
    WaitEnd wait_all(uint64_t limit_ns, std::string& error);
    [[noreturn]] void fail_stopped(const std::string& why);
    void check_fault();
    void check_usable() const;

    DeviceApi& api_;
    KernelHostOptions options_;
    std::vector<DeviceClaim> claims_;
    std::vector<KernelLink> links_;
    uint32_t epoch_ = 0, next_pos_ = 0, seq_ = 0;
    bool running_ = false, broken_ = false, wedged_ = false;
    bool cancel_sent_ = false;  // the last run asked the device to stop early
};

}  // namespace mk

// A scripted device behind the DeviceApi seam for CPU tests, driven by the host thread: virtual time
// advances in idle(), and each fake kernel plays the interpreter's side of the mailbox protocol
// (runtime/cuda/control.hpp), one step per idle() — or gets stuck, ignores the abort, or dies.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "runtime/cuda/control.hpp"
#include "runtime/cuda/device_api.hpp"

namespace mk::test {

enum class FakeBehavior {
    answers,        // serves commands; stops on the host's abort
    stuck,          // never makes progress; ends on the host's abort with fault flag 2 (as the watchdog does)
    ignores_abort,  // never makes progress and never ends
    dies,           // the launch fails at once (a sticky error)
};

struct FakeKernelSpec {
    FakeBehavior behavior = FakeBehavior::answers;
    uint32_t fault_at_step = UINT32_MAX;  // a watchdog fault record instead of this step (epoch-relative: command step)
};

// step(token, pos) -> the sampled token: the model the fake device runs.
using FakeStep = std::function<int32_t(int32_t token, int32_t pos)>;

class FakeDevice final : public DeviceApi {
public:
    void* new_stream() { return reinterpret_cast<void*>(uintptr_t(++n_streams_)); }

    // Resident when `single` is null (serves posted commands until an exit), else runs `single` once.
    void launch(void* stream, const FakeKernelSpec& spec, Mailbox* mailbox, const Command* single, FakeStep step) {
        Kernel& k = kernels_[stream];
        k = Kernel{};
        k.spec = spec;
        k.mailbox = mailbox;
        k.step = std::move(step);
        k.running = spec.behavior != FakeBehavior::dies;
        k.failed = spec.behavior == FakeBehavior::dies;
        if (single) {
            k.resident = false;
            start(k, *single);
        }
    }

    Queue query(int, void* stream, std::string& error) override {
        auto it = kernels_.find(stream);
        if (it == kernels_.end()) return Queue::idle;
        if (it->second.failed) {
            error = "an illegal memory access was encountered (fake)";
            return Queue::failed;
        }
        return it->second.running ? Queue::busy : Queue::idle;
    }
    void idle(uint64_t ns) override {
        now_ns_ += ns < 1000 ? 1000 : ns;
        for (auto& [stream, k] : kernels_)
            if (k.running) tick(k);
    }
    uint64_t now_ns() override { return now_ns_; }

    uint32_t commands_run() const { return commands_run_; }

private:
    struct Kernel {
        FakeKernelSpec spec;
        Mailbox* mailbox = nullptr;
        FakeStep step;
        bool running = false, failed = false, resident = true, in_command = false;
        uint32_t handled_seq = 0, s = 0;
        Command command{};
        int32_t last = 0;
    };

    void start(Kernel& k, const Command& c) {
        k.command = c;
        k.s = 0;
        k.in_command = c.n_steps > 0;
        ++commands_run_;
    }
    void end(Kernel& k, uint32_t fault_flag) {
        if (fault_flag) {
            k.mailbox->fault.sm = 0;
            k.mailbox->fault.index = 0;
            k.mailbox->fault.counter = 0;
            k.mailbox->fault.epoch = k.command.epoch0 + k.s;
            k.mailbox->fault.value = 0;
            k.mailbox->fault.target = 1;
            k.mailbox->fault.waited_ns = fault_flag == 1 ? 2000000000ull : 0;
            k.mailbox->fault.flag = fault_flag;
        }
        k.running = false;
    }

    void tick(Kernel& k) {
        Mailbox& m = *k.mailbox;
        if (k.spec.behavior == FakeBehavior::ignores_abort) return;
        if (m.host_abort) return end(k, 2);
        if (k.spec.behavior == FakeBehavior::stuck) return;
        if (!k.in_command) {
            if (!k.resident) return end(k, 0);
            if (m.command_seq <= k.handled_seq) return;
            k.handled_seq = m.command_seq;
            if (CommandKind(m.command.kind) == CommandKind::exit) return end(k, 0);
            start(k, m.command);
            return;
        }
        const Command& c = k.command;
        const uint32_t s = k.s;
        if (s == k.spec.fault_at_step) return end(k, 1);
        const int32_t token = s < c.n_tokens ? c.tokens[s] : k.last;
        k.last = k.step(token, c.pos0 + int32_t(s));
        m.tokens[s % kTokenRing] = k.last;
        bool stop_token = false;
        for (uint32_t i = 0; i < c.n_stop; ++i) stop_token = stop_token || c.stop_tokens[i] == k.last;
        const bool last = s + 1 >= c.n_steps;
        const bool stop = last || (s + 1 >= c.n_tokens && stop_token) || m.cancel != 0;
        if (stop && !last) m.stopped = 1;
        m.steps_done = s + 1;
        k.s = s + 1;
        if (!stop) return;
        k.in_command = false;
        if (k.resident) m.run_done = k.handled_seq;
        else end(k, 0);
    }

    std::map<void*, Kernel> kernels_;
    uint64_t now_ns_ = 1;
    uint32_t n_streams_ = 0, commands_run_ = 0;
};

}  // namespace mk::test

// KernelHost, the resident-kernel claims and the bounded stream wait (see kernel_host.hpp, device_api.hpp).
#include "runtime/cuda/kernel_host.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "models/error.hpp"
#include "runtime/stall_report.hpp"

namespace mk {

namespace {

// The device writes these while the kernel runs: read them through volatile, then order what follows.
uint32_t device_written(const volatile uint32_t& value) {
    const uint32_t v = value;
    std::atomic_thread_fence(std::memory_order_acquire);
    return v;
}
int32_t ring_token(const Mailbox& m, uint32_t step) {
    return *static_cast<const volatile int32_t*>(&m.tokens[step % kTokenRing]);
}

struct Claims {
    struct Device {
        std::string resident;                       // the resident program's name; "" when none
        std::map<uint64_t, std::string> shared;     // the other programs, by claim id
    };
    std::mutex mutex;
    std::map<int, Device> devices;
    uint64_t next_id = 0;
};
Claims& claims() {
    static Claims c;
    return c;
}

constexpr uint64_t kMs = 1000000;

}  // namespace

DeviceClaim::DeviceClaim(int device, Kind kind, std::string holder) {
    Claims& c = claims();
    std::lock_guard lock(c.mutex);
    Claims::Device& d = c.devices[device];
    if (!d.resident.empty()) {
        if (kind == Kind::resident)
            fail("GPU {} already runs {}; a resident megakernel holds every SM until it ends, so one device runs one: "
                 "end that program (its Session) first", device, d.resident);
        fail("GPU {} runs {}, which holds every SM until it ends: {} would never start; end that program first",
             device, d.resident, holder);
    }
    if (kind == Kind::resident && !d.shared.empty()) {
        std::string names;
        for (const auto& [id, name] : d.shared) names += (names.empty() ? "" : ", ") + name;
        fail("GPU {} has {} other CUDA program(s) ({}); {} would hold every SM while they still need it (their "
             "steps, and freeing their memory, would wait for it forever): end them first", device, d.shared.size(),
             names, holder);
    }
    id_ = ++c.next_id;
    if (kind == Kind::resident) d.resident = std::move(holder);
    else d.shared.emplace(id_, std::move(holder));
    device_ = device;
}
DeviceClaim::~DeviceClaim() {
    if (device_ < 0) return;
    Claims& c = claims();
    std::lock_guard lock(c.mutex);
    Claims::Device& d = c.devices[device_];
    if (d.shared.erase(id_) == 0) d.resident.clear();
}
DeviceClaim& DeviceClaim::operator=(DeviceClaim&& other) noexcept {
    if (this != &other) {
        this->~DeviceClaim();
        device_ = other.device_;
        id_ = other.id_;
        other.device_ = -1;
    }
    return *this;
}

WaitEnd wait_streams(DeviceApi& api, std::span<const StreamRef> streams, uint64_t limit_ns, std::string& error) {
    const uint64_t start = api.now_ns();
    for (;;) {
        bool busy = false;
        for (const StreamRef& s : streams) {
            std::string why;
            const DeviceApi::Queue q = api.query(s.device, s.stream, why);
            if (q == DeviceApi::Queue::failed) {
                error = fmt::format("GPU {}: {}", s.device, why);
                return WaitEnd::failed;
            }
            busy = busy || q == DeviceApi::Queue::busy;
        }
        if (!busy) return WaitEnd::idle;
        const uint64_t waited = api.now_ns() - start;
        if (waited >= limit_ns) return WaitEnd::timed_out;
        // Yield while a step may still end within microseconds; past 1 ms, 20 µs sleeps.
        api.idle(waited < kMs ? 0 : 20000);
    }
}

KernelHost::KernelHost(DeviceApi& api, KernelHostOptions options) : api_(api), options_(std::move(options)) {
    for (int device : options_.devices)
        claims_.emplace_back(device, options_.resident ? DeviceClaim::Kind::resident : DeviceClaim::Kind::shared,
                             options_.name);
}

KernelHost::~KernelHost() {
    if (running_) shutdown();
    if (wedged_)
        for (DeviceClaim& claim : claims_) claim.keep_forever();
}

void KernelHost::add(const KernelLink& link) { links_.push_back(link); }

uint64_t KernelHost::answer_limit_ns() const { return (4ull * options_.watchdog_ms + 10000) * kMs; }
uint64_t KernelHost::abort_grace_ns() const { return (std::max<uint64_t>(options_.watchdog_ms, 2000) + 1000) * kMs; }

std::vector<StreamRef> KernelHost::streams() const {
    std::vector<StreamRef> out;
    for (const KernelLink& l : links_) out.push_back({l.device, l.stream});
    return out;
}

WaitEnd KernelHost::wait_all(uint64_t limit_ns, std::string& error) {
    const std::vector<StreamRef> s = streams();
    return wait_streams(api_, s, limit_ns, error);
}

void KernelHost::abort_all() {
    for (const KernelLink& l : links_) l.mailbox->host_abort = 1;
}

bool KernelHost::any_fault() const {
    for (const KernelLink& l : links_)
        if (device_written(l.mailbox->fault.flag) != 0) return true;
    return false;
}

void KernelHost::check_usable() const {
    if (wedged_)
        fail("CUDA: an earlier kernel on GPU {} did not end after the abort; the device is unusable until this "
             "process exits", links_.empty() ? 0 : links_[0].device);
    if (links_.empty()) fail("CUDA: the program has no kernel");
}

Command KernelHost::command(uint32_t n_steps, std::span<const int32_t> inputs) {
    Command c{};
    c.kind = uint32_t(CommandKind::run);
    c.n_steps = n_steps;
    c.epoch0 = epoch_;
    c.pos0 = int32_t(next_pos_);
    c.n_tokens = uint32_t(inputs.size());
    for (const KernelLink& l : links_) {
        if (inputs.size() > l.max_tokens) fail("CUDA: {} input tokens; the buffer holds {}", inputs.size(), l.max_tokens);
        std::copy(inputs.begin(), inputs.end(), l.tokens);
        if (!options_.resident) {  // a launch reads them; post() does this for the resident kernel
            l.mailbox->steps_done = 0;
            l.mailbox->stopped = 0;
            l.mailbox->cancel = 0;
        }
    }
    return c;
}

void KernelHost::post(const Command& c) {
    ++seq_;
    for (const KernelLink& l : links_) {
        Mailbox& m = *l.mailbox;
        m.command = c;
        m.command.tokens = l.device_tokens;
        m.steps_done = 0;
        m.stopped = 0;
        m.cancel = 0;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        m.command_seq = seq_;
    }
}

void KernelHost::fail_stopped(const std::string& why) {
    if (wedged_)
        fail("{}; it did not end within {} ms of the abort either, so GPU {} is unusable until this process exits",
             why, abort_grace_ns() / kMs, links_[0].device);
    fail("{}", why);
}

void KernelHost::run(const Command& c, const std::function<bool(uint32_t)>& progress, const std::atomic<bool>* cancel) {
    check_usable();
    Mailbox& first = *links_[0].mailbox;
    cancel_sent_ = false;
    std::string error;
    if (!options_.resident) {
        wait_launched();
    } else {
        post(c);
        // The device's watchdog fires first; this bound only catches a kernel that stopped answering.
        uint64_t last_progress = api_.now_ns();
        uint32_t seen = 0;
        bool aborted = false;
        for (;;) {
            bool done = true;
            for (const KernelLink& l : links_) done = done && device_written(l.mailbox->run_done) == seq_;
            if (done) break;
            const uint64_t now = api_.now_ns();
            if (const uint32_t steps = device_written(first.steps_done); steps != seen) {
                seen = steps;
                last_progress = now;
                if (progress && !progress(seen) && !cancel_sent_) {
                    send_cancel();
                    cancel_sent_ = true;
                }
            }
            if (cancel && !cancel_sent_ && cancel->load()) {
                send_cancel();
                cancel_sent_ = true;
            }
            if (any_fault()) break;
            for (const KernelLink& l : links_) {
                std::string why;
                const DeviceApi::Queue q = api_.query(l.device, l.stream, why);
                if (q == DeviceApi::Queue::busy) continue;
                // A resident kernel ends only on an exit command: this one died (or faulted and ended).
                running_ = false;
                broken_ = true;
                abort_all();  // the other GPUs' kernels would wait for this one's transfers
                if (wait_all(abort_grace_ns(), error) == WaitEnd::timed_out) wedged_ = true;
                if (q == DeviceApi::Queue::failed) fail_stopped(fmt::format("the resident interpreter kernel on GPU {} "
                                                                            "failed: {}", l.device, why));
                check_fault();
                fail_stopped(fmt::format("the resident interpreter kernel on GPU {} ended unexpectedly", l.device));
            }
            if (now - last_progress > answer_limit_ns()) {
                aborted = true;
                break;
            }
            // Busy-poll while tokens flow (a sleep would add its granularity to every step's latency);
            // back off only when nothing has arrived for 50 ms.
            api_.idle(now - last_progress > 50 * kMs ? 20000 : 0);
        }
        if (aborted || any_fault()) {
            abort_all();  // one GPU's fault leaves its peers waiting for its transfers
            if (wait_all(abort_grace_ns(), error) == WaitEnd::timed_out) wedged_ = true;
            running_ = false;
            broken_ = true;
            check_fault();
            fail_stopped(fmt::format("the resident interpreter kernel stopped answering for {} ms and was aborted",
                                     answer_limit_ns() / kMs));
        }
    }
    const uint32_t done = device_written(first.steps_done);
    if (progress) progress(done);
    epoch_ += done;
    next_pos_ += done;
}

void KernelHost::wait_launched() {
    std::string error;
    const WaitEnd end = wait_all(answer_limit_ns(), error);
    if (end == WaitEnd::failed) {
        broken_ = true;
        fail("the interpreter kernel failed: {}", error);
    }
    if (end == WaitEnd::timed_out) {
        abort_all();
        if (wait_all(abort_grace_ns(), error) == WaitEnd::timed_out) wedged_ = true;
        broken_ = true;
        if (!wedged_) check_fault();
        fail_stopped(fmt::format("the interpreter kernel did not end within {} ms and was aborted",
                                 answer_limit_ns() / kMs));
    }
    check_fault();
}

void KernelHost::run_launched(uint32_t n_positions) {
    check_usable();
    wait_launched();
    next_pos_ += n_positions;
}

void KernelHost::send_cancel() {
    for (const KernelLink& l : links_) l.mailbox->cancel = 1;
}

DeviceLoopResult KernelHost::generate(std::span<const int32_t> prompt, uint32_t n_new, std::span<const int32_t> stop_tokens,
                                      const std::function<bool(int32_t)>& on_token, const std::atomic<bool>* cancel) {
    DeviceLoopResult r;
    if (prompt.empty() || n_new == 0) return r;
    if (!options_.resident) fail("generate: the device-side loop needs the resident kernel (not --stepwise)");
    if (stop_tokens.size() > kMaxStopTokens) fail("generate: at most {} stop tokens", kMaxStopTokens);
    const uint32_t n_prompt = uint32_t(prompt.size());
    Command c = command(n_prompt + n_new - 1, prompt);
    c.n_stop = uint32_t(stop_tokens.size());
    std::copy(stop_tokens.begin(), stop_tokens.end(), c.stop_tokens);
    const Mailbox& m = *links_[0].mailbox;  // every rank samples the same token; the first GPU's are read
    const uint64_t t0 = api_.now_ns();
    uint32_t streamed = n_prompt - 1;  // the first generated token is step n_prompt - 1's
    bool listening = true;
    run(c, [&](uint32_t steps_done) {
        if (steps_done > streamed + kTokenRing)
            fail("generate: the host fell {} tokens behind the device's ring of {}", steps_done - streamed, kTokenRing);
        for (; streamed < steps_done; ++streamed) {
            const int32_t token = ring_token(m, streamed);
            if (r.tokens.empty()) r.first_token_ms = double(api_.now_ns() - t0) / 1e6;
            r.tokens.push_back(token);
            if (listening && on_token) listening = on_token(token);
        }
        return listening;
    }, cancel);
    r.total_ms = double(api_.now_ns() - t0) / 1e6;
    r.n_steps = device_written(m.steps_done);
    r.stopped = device_written(m.stopped) != 0;
    const bool stop_token = !r.tokens.empty() && std::find(stop_tokens.begin(), stop_tokens.end(), r.tokens.back()) !=
                                                     stop_tokens.end();
    r.cancelled = r.stopped && cancel_sent_ && !stop_token;
    return r;
}

int32_t KernelHost::last_token() const { return ring_token(*links_[0].mailbox, 0); }

void KernelHost::abort_and_wait() {
    std::string error;
    abort_all();
    if (wait_all(abort_grace_ns(), error) == WaitEnd::timed_out) wedged_ = true;
    running_ = false;
}

bool KernelHost::shutdown() {
    if (wedged_ || links_.empty()) return !wedged_;
    std::string error;
    if (running_) {
        Command exit{};
        exit.kind = uint32_t(CommandKind::exit);
        post(exit);
    }
    if (wait_all(running_ ? abort_grace_ns() : answer_limit_ns(), error) == WaitEnd::timed_out) abort_and_wait();
    running_ = false;
    return !wedged_;
}

void KernelHost::reset_after_relaunch() {
    for (const KernelLink& l : links_) std::memset(static_cast<void*>(l.mailbox), 0, sizeof(Mailbox));
    epoch_ = 0;
    seq_ = 0;
    broken_ = false;
}

// Reports the first kernel's fault record that a watchdog (not the host's abort) wrote, else the first.
void KernelHost::check_fault() {
    const KernelLink* faulted = nullptr;
    uint32_t faulted_flag = 0;
    for (const KernelLink& l : links_) {
        const uint32_t flag = device_written(l.mailbox->fault.flag);
        if (flag != 0 && (!faulted || (flag == 1 && faulted_flag != 1))) {
            faulted = &l;
            faulted_flag = flag;
        }
    }
    if (!faulted) return;
    const FaultRecord f = const_cast<const FaultRecord&>(faulted->mailbox->fault);
    broken_ = true;
    const std::string where =
        links_.size() > 1 ? fmt::format(" on GPU {} (rank {})", faulted->device, faulted->first_rank) : "";
    if (f.flag == 3)
        fail("CUDA{}: sm {}'s bulk copies had not landed {} ms after its last step; its shared memory was released "
             "with copies in flight", where, f.sm, f.waited_ns / kMs);
    if (f.counter == 0xffffffffu)
        fail("CUDA watchdog{}: sm {} waited {} ms for the previous step's token (step {})", where, f.sm,
             f.waited_ns / kMs, f.epoch);
    if (!faulted->schedule) fail("CUDA watchdog{}: sm {} counter {} at {} < {}", where, f.sm, f.counter, f.value, f.target);
    // The record names the block; its stream in the combined schedule follows its rank's.
    const Schedule& s = *faulted->schedule;
    BlockedStream b{faulted->first_rank * s.target.n_sms + f.sm, f.index, uint16_t(f.counter), f.value, f.target};
    fail("CUDA watchdog{}: {} after {} ms\n{}", where, f.flag == 2 ? "aborted by the host" : "a wait exceeded the bound",
         f.waited_ns / kMs, format_stall_report(s, f.epoch, std::span<const BlockedStream>(&b, 1)));
}

}  // namespace mk

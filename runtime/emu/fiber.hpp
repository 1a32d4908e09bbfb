// A fiber: a function running on its own stack, entered and left only by explicit switches with the
// scheduler's context (ucontext). Under ASan every switch is announced so stack checks follow it.
#pragma once
#include <ucontext.h>

#include <cstddef>
#include <cstdint>

namespace mk_emu {

class Fiber {
public:
    using Entry = void (*)(void* arg);
    Fiber(Entry entry, void* arg, size_t stack_bytes);
    ~Fiber();
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // Scheduler side: run the fiber until it switches back (or its entry returns).
    void resume();
    // Fiber side: hand control back to the scheduler that resumed it.
    void suspend();
    bool finished() const { return finished_; }

private:
    static void trampoline(unsigned lo, unsigned hi);
    ucontext_t context_{};
    ucontext_t scheduler_{};
    void* stack_ = nullptr;
    size_t stack_bytes_ = 0;
    Entry entry_;
    void* arg_;
    bool finished_ = false;
    // ASan's fake-stack handle while the scheduler's stack is switched away from (unused without ASan).
    void* fake_stack_ = nullptr;
    const void* scheduler_stack_ = nullptr;
    size_t scheduler_stack_bytes_ = 0;
};

}  // namespace mk_emu

// A fiber: a function running on its own stack, entered and left only by explicit switches with the
// scheduler's context. On x86-64 a switch saves the callee-saved registers and swaps stack pointers (no
// system call, unlike swapcontext's signal mask); elsewhere ucontext. Under ASan every switch is announced.
#pragma once
#include <cstddef>
#include <cstdint>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

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

    static void run(Fiber* f);  // the first frame on the fiber's stack

private:
#if defined(__x86_64__)
    void* sp_ = nullptr;            // the fiber's saved stack pointer while it is suspended
    void* scheduler_sp_ = nullptr;  // the scheduler's while the fiber runs
#else
    ucontext_t context_{};
    ucontext_t scheduler_{};
#endif
    void* stack_ = nullptr;
    size_t stack_bytes_ = 0;
    Entry entry_;
    void* arg_;
    bool finished_ = false;
    // ASan's fake-stack handle and the scheduler's stack while it is switched away from (unused without ASan).
    void* fake_stack_ = nullptr;
    const void* scheduler_stack_ = nullptr;
    size_t scheduler_stack_bytes_ = 0;
};

}  // namespace mk_emu

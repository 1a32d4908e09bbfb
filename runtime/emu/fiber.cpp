// Fibers over ucontext, with AddressSanitizer's fiber-switch annotations when it is on.
#include "runtime/emu/fiber.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define MK_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MK_EMU_ASAN 1
#endif
#endif
#if MK_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace mk_emu {

Fiber::Fiber(Entry entry, void* arg, size_t stack_bytes) : stack_bytes_(stack_bytes), entry_(entry), arg_(arg) {
    // Lazily committed; a guard page below catches an overflowing device stack.
    void* mem = mmap(nullptr, stack_bytes_ + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) throw std::bad_alloc();
    mprotect(mem, 4096, PROT_NONE);
    stack_ = static_cast<char*>(mem) + 4096;
    getcontext(&context_);
    context_.uc_stack.ss_sp = stack_;
    context_.uc_stack.ss_size = stack_bytes_;
    context_.uc_link = nullptr;
    const uintptr_t self = reinterpret_cast<uintptr_t>(this);
    makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, unsigned(self), unsigned(self >> 32));
}

Fiber::~Fiber() {
#if MK_EMU_ASAN
    __asan_unpoison_memory_region(stack_, stack_bytes_);  // an abandoned fiber leaves poisoned frames behind
#endif
    munmap(static_cast<char*>(stack_) - 4096, stack_bytes_ + 4096);
}

void Fiber::trampoline(unsigned lo, unsigned hi) {
    Fiber* f = reinterpret_cast<Fiber*>(uintptr_t(lo) | uintptr_t(hi) << 32);
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &f->scheduler_stack_, &f->scheduler_stack_bytes_);
#endif
    f->entry_(f->arg_);
    f->finished_ = true;
#if MK_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, f->scheduler_stack_, f->scheduler_stack_bytes_);  // this stack dies
#endif
    setcontext(&f->scheduler_);
}

void Fiber::resume() {
#if MK_EMU_ASAN
    __sanitizer_start_switch_fiber(&fake_stack_, stack_, stack_bytes_);
#endif
    swapcontext(&scheduler_, &context_);
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_, nullptr, nullptr);
#endif
}

void Fiber::suspend() {
#if MK_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, scheduler_stack_, scheduler_stack_bytes_);
#endif
    swapcontext(&context_, &scheduler_);
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, &scheduler_stack_, &scheduler_stack_bytes_);
#endif
}

}  // namespace mk_emu

// Fibers (see fiber.hpp), with AddressSanitizer's fiber-switch annotations when it is on.
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

#if defined(__x86_64__)
// mk_emu_switch(&save_sp, load_sp): pushes the System V callee-saved registers, saves the stack pointer,
// loads the other, pops its registers and returns into it. mk_emu_fiber_start is where a new fiber's
// first switch returns to: its Fiber* was left in rbx.
extern "C" void mk_emu_switch(void** save_sp, void* load_sp);
extern "C" void mk_emu_fiber_start();
extern "C" void mk_emu_fiber_main(mk_emu::Fiber* f) { mk_emu::Fiber::run(f); }
asm(R"(
    .text
    .globl mk_emu_switch
    .type mk_emu_switch, @function
mk_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mk_emu_switch, .-mk_emu_switch

    .globl mk_emu_fiber_start
    .type mk_emu_fiber_start, @function
mk_emu_fiber_start:
    movq %rbx, %rdi
    call mk_emu_fiber_main@PLT
    ud2
    .size mk_emu_fiber_start, .-mk_emu_fiber_start
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

namespace mk_emu {

Fiber::Fiber(Entry entry, void* arg, size_t stack_bytes) : stack_bytes_(stack_bytes), entry_(entry), arg_(arg) {
    // Lazily committed; a guard page below catches an overflowing device stack.
    void* mem = mmap(nullptr, stack_bytes_ + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) throw std::bad_alloc();
    mprotect(mem, 4096, PROT_NONE);
    stack_ = static_cast<char*>(mem) + 4096;
#if defined(__x86_64__)
    // The first switch pops six registers (rbx = this) and returns into mk_emu_fiber_start with the stack
    // 16-byte aligned, as a call site leaves it.
    const uintptr_t top = (reinterpret_cast<uintptr_t>(stack_) + stack_bytes_) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top - 72);
    sp[0] = nullptr;                                          // r15
    sp[1] = nullptr;                                          // r14
    sp[2] = nullptr;                                          // r13
    sp[3] = nullptr;                                          // r12
    sp[4] = this;                                             // rbx
    sp[5] = nullptr;                                          // rbp
    sp[6] = reinterpret_cast<void*>(&mk_emu_fiber_start);     // return address
    sp_ = sp;
#else
    getcontext(&context_);
    context_.uc_stack.ss_sp = stack_;
    context_.uc_stack.ss_size = stack_bytes_;
    context_.uc_link = nullptr;
    const uintptr_t self = reinterpret_cast<uintptr_t>(this);
    makecontext(&context_, reinterpret_cast<void (*)()>(+[](unsigned lo, unsigned hi) {
                    Fiber::run(reinterpret_cast<Fiber*>(uintptr_t(lo) | uintptr_t(hi) << 32));
                }),
                2, unsigned(self), unsigned(self >> 32));
#endif
}

Fiber::~Fiber() {
#if MK_EMU_ASAN
    __asan_unpoison_memory_region(stack_, stack_bytes_);  // an abandoned fiber leaves poisoned frames behind
#endif
    munmap(static_cast<char*>(stack_) - 4096, stack_bytes_ + 4096);
}

void Fiber::run(Fiber* f) {
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &f->scheduler_stack_, &f->scheduler_stack_bytes_);
#endif
    f->entry_(f->arg_);
    f->finished_ = true;
#if MK_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, f->scheduler_stack_, f->scheduler_stack_bytes_);  // this stack dies
#endif
#if defined(__x86_64__)
    void* dead = nullptr;
    mk_emu_switch(&dead, f->scheduler_sp_);
#else
    setcontext(&f->scheduler_);
#endif
    __builtin_unreachable();
}

void Fiber::resume() {
#if MK_EMU_ASAN
    __sanitizer_start_switch_fiber(&fake_stack_, stack_, stack_bytes_);
#endif
#if defined(__x86_64__)
    mk_emu_switch(&scheduler_sp_, sp_);
#else
    swapcontext(&scheduler_, &context_);
#endif
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_, nullptr, nullptr);
#endif
}

void Fiber::suspend() {
#if MK_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, scheduler_stack_, scheduler_stack_bytes_);
#endif
#if defined(__x86_64__)
    mk_emu_switch(&sp_, scheduler_sp_);
#else
    swapcontext(&context_, &scheduler_);
#endif
#if MK_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, &scheduler_stack_, &scheduler_stack_bytes_);
#endif
}

}  // namespace mk_emu

// The device's inline-PTX primitives, each behind one named function: under nvcc the instruction
// itself, under the CUDA emulator (MK_CUDA_EMU, runtime/emu) its checked twin. Device code uses these,
// never asm of its own. MK_WHERE lets the emulator's reports name the caller's source line.
#pragma once
#include <cstdint>

#if defined(MK_CUDA_EMU)
#include <mk_emu/device.hpp>
#include <mk_emu/mma.hpp>
#define MK_WHERE , ::mk_emu::Where where = ::mk_emu::Where::current()
#define MK_WHERE_ONLY ::mk_emu::Where where = ::mk_emu::Where::current()
#define MK_WHERE_ARG , where
// A kernel's dynamic shared memory, `extern __shared__` on the device.
#define MK_DYNAMIC_SHARED(T, name, align) T* name = static_cast<T*>(::mk_emu::dynamic_shared())
#else
#define MK_WHERE
#define MK_WHERE_ONLY
#define MK_WHERE_ARG
#define MK_DYNAMIC_SHARED(T, name, align) extern __shared__ __align__(align) T name[]
#endif

namespace mk::ptx {

#if defined(MK_CUDA_EMU)

__device__ inline uint32_t smem_address(const void* p) { return ::mk_emu::shared_address(p); }
__device__ inline void bar_sync(uint32_t id, uint32_t count MK_WHERE) { ::mk_emu::bar_sync(id, count, where); }
__device__ inline uint64_t global_timer_ns() { return ::mk_emu::global_timer_ns(); }
// The SM's cycle counter; the emulator's twin counts nanoseconds (a 1 GHz clock).
__device__ inline uint64_t clock_cycles() { return ::mk_emu::global_timer_ns(); }
__device__ inline void fence_proxy_async_global(MK_WHERE_ONLY) { ::mk_emu::fence_proxy_async(where); }
__device__ inline void fence_mbarrier_init(MK_WHERE_ONLY) { ::mk_emu::fence(where); }
__device__ inline void mbarrier_init(uint64_t* bar, uint32_t count MK_WHERE) { ::mk_emu::mbarrier_init(bar, count, where); }
__device__ inline void mbarrier_arrive(uint64_t* bar MK_WHERE) { ::mk_emu::mbarrier_arrive(bar, 0, where); }
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes MK_WHERE) {
    ::mk_emu::mbarrier_arrive(bar, bytes, where);
}
__device__ inline bool mbarrier_try_wait(uint64_t* bar, uint32_t parity MK_WHERE) {
    return ::mk_emu::mbarrier_try_wait_parity(bar, parity, where);
}
__device__ inline void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar MK_WHERE) {
    ::mk_emu::bulk_copy_global_to_shared(dst, src, bytes, bar, where);
}
__device__ inline void prefetch_l2(const void* src, uint32_t bytes MK_WHERE) { ::mk_emu::prefetch_l2(src, bytes, where); }
__device__ inline void prefetch_l1(const void* p MK_WHERE) { ::mk_emu::prefetch_l1(p, where); }
// D = A * B + C for the warp: A 16 x 16 (row), B 16 x 8 (col), bf16 or f16 in, f32 accumulate; fragments as the
// PTX ISA lays them out (mk_emu/mma.hpp spells the layout). The whole warp calls it.
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4] MK_WHERE) {
    ::mk_emu::mma_m16n8k16(::mk_emu::MmaInput::bf16, d, a, b, c, where);
}
__device__ inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                        const float (&c)[4] MK_WHERE) {
    ::mk_emu::mma_m16n8k16(::mk_emu::MmaInput::f16, d, a, b, c, where);
}
// Two floats rounded to bf16 (to nearest, ties to even) and packed: lo in bits 0-15, hi in 16-31. NaN: a quiet NaN.
__device__ inline uint32_t bf16x2_rn(float lo, float hi) {
    auto round = [](float f) {
        uint32_t x;
        __builtin_memcpy(&x, &f, 4);
        if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
        return (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    };
    return round(lo) | round(hi) << 16;
}
// x, which the compiler may not assume it knows (nvcc: an empty volatile asm).
__device__ inline uint32_t opaque(uint32_t x) { return x; }
__device__ inline void griddep_launch_dependents(MK_WHERE_ONLY) { ::mk_emu::griddep_launch_dependents(where); }
__device__ inline void griddep_wait(MK_WHERE_ONLY) { ::mk_emu::griddep_wait(where); }

#else

__device__ inline uint32_t smem_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ inline void bar_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ inline uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ inline uint64_t clock_cycles() { return uint64_t(clock64()); }
// Generic-proxy writes seen through an acquire become visible to later async-proxy (bulk) reads.
__device__ inline void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
__device__ inline void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ inline void mbarrier_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ inline void mbarrier_arrive(uint64_t* bar) {
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared::cta.b64 state, [%0];\n\t}" ::"r"(smem_address(bar))
                 : "memory");
}
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(
                     smem_address(bar)),
                 "r"(bytes)
                 : "memory");
}
// True once the phase with this parity has completed.
__device__ inline bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
    return done != 0;
}
// A 1-D bulk copy global -> shared that completes `bar`'s transaction count (sm_90 TMA).
__device__ inline void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
}
__device__ inline void prefetch_l2(const void* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// The line holding p into the SM's L1 (a hint: nothing waits for it).
__device__ inline void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
// D = A * B + C for the warp (tensor cores, sm_80+): fragments as the PTX ISA lays them out (mk_emu/mma.hpp).
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}
__device__ inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                        const float (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}
// Two floats rounded to bf16 (to nearest, ties to even) and packed: lo in bits 0-15, hi in 16-31; one instruction.
__device__ inline uint32_t bf16x2_rn(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// x, which the compiler may not assume it knows, nor compute before this point: values an op derives from it are
// not hoisted out of the interpreter's loop, where they would hold registers through every other op.
__device__ inline uint32_t opaque(uint32_t x) {
    asm volatile("" : "+r"(x));
    return x;
}
// Programmatic dependent launch (sm_90): let the stream's next kernel, launched with programmatic stream
// serialization, start once every block of this grid has run this (or exited); and, in such a kernel, wait
// until the kernel before it has ended and its memory is visible (a no-op in a kernel launched otherwise).
__device__ inline void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ inline void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

#endif

}  // namespace mk::ptx

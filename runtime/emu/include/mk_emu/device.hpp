// The device side of the CUDA emulator: what kernel code compiled with g++ (-DMK_CUDA_EMU) calls in
// place of the hardware's built-ins. Every call that can make a thread wait (barriers, warp
// collectives, polls, sleeps) is a switch point of the emulator's one seeded scheduler; the rest
// (thread indices, bit casts, math) is plain host code.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "mk_emu/types.hpp"

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __grid_constant__
#define __restrict__ __restrict

namespace mk_emu {

using Where = std::source_location;

// The calling fiber's thread, block and grid geometry.
dim3 thread_idx();
dim3 block_idx();
dim3 block_dim();
dim3 grid_dim();
// The calling block's dynamic shared memory (the kernel's `extern __shared__` array).
void* dynamic_shared();

// Synchronization points.
void sync_threads(Where where = Where::current());                           // bar.sync 0 (all threads)
void bar_sync(uint32_t id, uint32_t count, Where where = Where::current());  // bar.sync id, count
void sync_warp(uint32_t mask, Where where = Where::current());
enum class Collective : uint32_t { shfl_idx, shfl_xor, shfl_down, shfl_up, ballot, any, all, syncwarp, exchange };
// A warp collective over 64-bit payloads: every lane of `mask` meets here with the same kind and mask.
uint64_t warp_collective(Collective kind, uint32_t mask, uint64_t value, int32_t arg, int32_t width, Where where);
// The whole warp exchanges `bytes` each: all[l * bytes ...] = lane l's `mine`, for every lane l (one rendezvous; the
// MMA twin's gather of its fragments, which shuffles would take 96 of).
void warp_exchange(const void* mine, uint32_t bytes, void* all, Where where);

// Memory-model hooks: an atomic access at `addr` (a switch point chosen by the seeded scheduler; a
// write counts as progress for the deadlock detector; a read is remembered as what a poll waits on).
void on_atomic(const void* addr, bool write, Where where);
void fence(Where where = Where::current());
// __nanosleep: a poll that yields for `ns` of virtual time.
void nanosleep(uint32_t ns, Where where = Where::current());
uint64_t global_timer_ns();

// Hopper async-copy primitives with their rules checked (the twins of the PTX seam).
uint32_t shared_address(const void* p);  // offset in the block's shared memory; a fault if p is not in it
void mbarrier_init(uint64_t* bar, uint32_t count, Where where = Where::current());
void mbarrier_arrive(uint64_t* bar, uint32_t tx_bytes, Where where = Where::current());
bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, Where where = Where::current());
void bulk_copy_global_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                Where where = Where::current());
void prefetch_l2(const void* src, uint32_t bytes, Where where = Where::current());
void prefetch_l1(const void* p, Where where = Where::current());  // a fault unless p is in a device allocation
// Programmatic dependent launch: this block lets the stream's next (programmatic) kernel start; and a wait,
// in a kernel so launched, until the kernel before it has ended (its memory visible).
void griddep_launch_dependents(Where where = Where::current());
void griddep_wait(Where where = Where::current());
void fence_proxy_async(Where where = Where::current());

template <typename T>
uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T>
T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

}  // namespace mk_emu

#define threadIdx (::mk_emu::thread_idx())
#define blockIdx (::mk_emu::block_idx())
#define blockDim (::mk_emu::block_dim())
#define gridDim (::mk_emu::grid_dim())
inline constexpr int warpSize = 32;

inline void __syncthreads(mk_emu::Where where = mk_emu::Where::current()) { mk_emu::sync_threads(where); }
inline void __syncwarp(unsigned mask = 0xffffffffu, mk_emu::Where where = mk_emu::Where::current()) {
    mk_emu::sync_warp(mask, where);
}
inline void __threadfence(mk_emu::Where where = mk_emu::Where::current()) { mk_emu::fence(where); }
inline void __threadfence_block(mk_emu::Where where = mk_emu::Where::current()) { mk_emu::fence(where); }
inline void __threadfence_system(mk_emu::Where where = mk_emu::Where::current()) { mk_emu::fence(where); }
inline void __nanosleep(unsigned ns, mk_emu::Where where = mk_emu::Where::current()) { mk_emu::nanosleep(ns, where); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int lane, int width = 32, mk_emu::Where w = mk_emu::Where::current()) {
    return mk_emu::from_bits<T>(mk_emu::warp_collective(mk_emu::Collective::shfl_idx, mask, mk_emu::to_bits(v), lane, width, w));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, mk_emu::Where w = mk_emu::Where::current()) {
    return mk_emu::from_bits<T>(mk_emu::warp_collective(mk_emu::Collective::shfl_xor, mask, mk_emu::to_bits(v), lane_mask, width, w));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, mk_emu::Where w = mk_emu::Where::current()) {
    return mk_emu::from_bits<T>(mk_emu::warp_collective(mk_emu::Collective::shfl_down, mask, mk_emu::to_bits(v), int(delta), width, w));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, mk_emu::Where w = mk_emu::Where::current()) {
    return mk_emu::from_bits<T>(mk_emu::warp_collective(mk_emu::Collective::shfl_up, mask, mk_emu::to_bits(v), int(delta), width, w));
}
inline unsigned __ballot_sync(unsigned mask, int p, mk_emu::Where w = mk_emu::Where::current()) {
    return unsigned(mk_emu::warp_collective(mk_emu::Collective::ballot, mask, p != 0, 0, 32, w));
}
inline int __any_sync(unsigned mask, int p, mk_emu::Where w = mk_emu::Where::current()) {
    return int(mk_emu::warp_collective(mk_emu::Collective::any, mask, p != 0, 0, 32, w));
}
inline int __all_sync(unsigned mask, int p, mk_emu::Where w = mk_emu::Where::current()) {
    return int(mk_emu::warp_collective(mk_emu::Collective::all, mask, p != 0, 0, 32, w));
}

// Atomics (device scope; the emulator runs one thread at a time, the builtins order against the host).
template <typename T>
T atomicAdd(T* p, T v, mk_emu::Where w = mk_emu::Where::current()) {
    mk_emu::on_atomic(p, true, w);
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
T atomicSub(T* p, T v, mk_emu::Where w = mk_emu::Where::current()) {
    mk_emu::on_atomic(p, true, w);
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
T atomicMax(T* p, T v, mk_emu::Where w = mk_emu::Where::current()) {
    mk_emu::on_atomic(p, true, w);
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
template <typename T>
T atomicExch(T* p, T v, mk_emu::Where w = mk_emu::Where::current()) {
    mk_emu::on_atomic(p, true, w);
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
T atomicCAS(T* p, T expected, T desired, mk_emu::Where w = mk_emu::Where::current()) {
    mk_emu::on_atomic(p, true, w);
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}

// Bit casts and the intrinsics the device code uses.
inline float __uint_as_float(unsigned v) { return mk_emu::from_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return unsigned(mk_emu::to_bits(v)); }
inline float __int_as_float(int v) { return mk_emu::from_bits<float>(uint32_t(v)); }
inline int __float_as_int(float v) { return int(mk_emu::to_bits(v)); }
// Volatile keeps g++ from fusing the add into a neighbouring multiply (FMA), as __fadd_rn promises.
inline float __fadd_rn(float a, float b) {
    volatile float r = a + b;
    return r;
}
inline float __fmul_rn(float a, float b) {
    volatile float r = a * b;
    return r;
}
inline void sincospi(double x, double* s, double* c) {
    *s = std::sin(x * 3.14159265358979323846);
    *c = std::cos(x * 3.14159265358979323846);
}
inline void sincospif(float x, float* s, float* c) {
    *s = std::sin(x * 3.14159265f);
    *c = std::cos(x * 3.14159265f);
}
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned __popc(unsigned v) { return unsigned(__builtin_popcount(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }

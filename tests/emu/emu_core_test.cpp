// The CUDA emulator's execution model on tiny kernels (tag [emu]): barriers, warp collectives, shared
// memory, atomics, mbarriers and bulk copies give the hardware's results under several seeds, and each
// planted defect (a barrier that cannot complete, a count or mask mismatch, a bad bulk copy, a missing
// expect_tx, a spin nobody ends, a grid that cannot become resident) is reported, never a hang.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda/atomic>
#include <cuda_runtime.h>
#include <mk_emu/emulator.hpp>
#include <mk_emu/mma.hpp>

#include "instructions/common/ptx.cuh"

namespace {

// Each case's own seeds, moved by MK_EMU_SEED when set (the opt-in sweep: tests/CMakeLists.txt).
mk_emu::Config small(uint64_t seed, uint32_t sms = 4) {
    mk_emu::Config c;
    c.n_sms = sms;
    c.seed = seed;
    if (const char* sweep = std::getenv("MK_EMU_SEED")) c.seed += 1000 * std::strtoull(sweep, nullptr, 10);
    c.spin_limit_ns = 50'000'000;  // 50 ms of virtual time: enough for these kernels, short for the tests
    return c;
}

template <typename T>
T* device_array(size_t n) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
    return static_cast<T*>(p);
}

// ---- kernels ----

// Sum of `in` per block: warp shuffles, then the warp sums through shared memory after __syncthreads.
__global__ void block_sum(const float* in, float* out) {
    MK_DYNAMIC_SHARED(float, red, 16);
    const uint32_t t = threadIdx.x, b = blockIdx.x;
    float v = in[b * blockDim.x + t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (t % 32 == 0) red[t / 32] = v;
    __syncthreads();
    if (t == 0) {
        float s = 0;
        for (uint32_t w = 0; w < blockDim.x / 32; ++w) s += red[w];
        out[b] = s;
    }
}

__global__ void votes(uint32_t* out) {
    const uint32_t lane = threadIdx.x;
    out[lane] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    out[32 + lane] = uint32_t(__any_sync(0xffffffffu, lane == 17)) | uint32_t(__all_sync(0xffffffffu, lane < 40)) << 1;
    out[64 + lane] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
    out[96 + lane] = __shfl_up_sync(0xffffffffu, lane * 10, 5);
    out[128 + lane] = __shfl_sync(0xffffffffu, lane * 10, 7, 8);
}

// Warps 1..3 meet at named barrier 1 (96 threads) while warp 0 goes on alone; `bad` gives warp 3 a count of 128.
__global__ void named_barrier(uint32_t* out, int bad) {
    const uint32_t t = threadIdx.x;
    if (t >= 32) {
        out[t] = t;
        mk::ptx::bar_sync(1, bad && t >= 96 ? 128 : 96);
        out[128 + t] = out[(t - 32 + 1) % 96 + 32] + 1000;  // every first store is done
    }
}

// One warp skips the __syncthreads the others wait at.
__global__ void missing_warp(int* out) {
    if (threadIdx.x / 32 != 2) __syncthreads();
    out[threadIdx.x] = 1;
}

// Lanes 0..15 shuffle with a full mask: lanes 16..31 never come.
__global__ void half_mask(float* out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Block 0 waits for a flag nobody sets (a removed signal).
__global__ void spin_forever(uint32_t* flag) {
    if (threadIdx.x == 0)
        while (cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*flag).load(cuda::memory_order_acquire) == 0)
            __nanosleep(100);
}

// Every thread adds its id into a log in the order the scheduler runs them.
__global__ void race_log(uint32_t* counter, uint32_t* log) {
    const uint32_t slot = atomicAdd(counter, 1u);
    log[slot] = blockIdx.x * blockDim.x + threadIdx.x;
}

enum class CopyDefect { none, read_before_wait, misaligned, no_expect_tx, outside_smem, short_expect_tx };

// Thread 0 bulk-copies 256 bytes of `src` into shared memory; the block then reads it back after the wait.
__global__ void bulk_copy(const float* src, float* out, int defect) {
    MK_DYNAMIC_SHARED(uint8_t, smem, 128);
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
    float* page = reinterpret_cast<float*>(smem + 128);
    const CopyDefect d = CopyDefect(defect);
    if (threadIdx.x == 0) {
        mk::ptx::mbarrier_init(bar, 1);
        mk::ptx::fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t bytes = 256;
        if (d == CopyDefect::no_expect_tx) mk::ptx::mbarrier_arrive(bar);
        else mk::ptx::mbarrier_arrive_expect_tx(bar, d == CopyDefect::short_expect_tx ? 128 : bytes);
        const uint8_t* from = reinterpret_cast<const uint8_t*>(src) + (d == CopyDefect::misaligned ? 4 : 0);
        void* to = d == CopyDefect::outside_smem ? static_cast<void*>(out) : static_cast<void*>(page);
        mk::ptx::bulk_copy_to_shared(to, from, bytes, bar);
    }
    if (d != CopyDefect::read_before_wait)
        while (!mk::ptx::mbarrier_try_wait(bar, 0)) {
        }
    out[threadIdx.x] = page[threadIdx.x];
    if (d == CopyDefect::read_before_wait)  // the copy must land before the block ends
        while (!mk::ptx::mbarrier_try_wait(bar, 0)) {
        }
}

// Bulk-copies `buf` into shared memory, lets warp 1 overwrite it with generic stores, then (after a
// __syncthreads: the stores are visible to the generic proxy) bulk-copies it again, with or without the
// fence.proxy.async the async proxy needs to see them.
__global__ void copy_after_store(float* buf, float* out, int fenced) {
    MK_DYNAMIC_SHARED(uint8_t, smem, 128);
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
    float* page = reinterpret_cast<float*>(smem + 128);
    if (threadIdx.x == 0) {
        mk::ptx::mbarrier_init(bar, 1);
        mk::ptx::fence_mbarrier_init();
    }
    __syncthreads();
    for (uint32_t phase = 0; phase < 2; ++phase) {
        if (threadIdx.x == 0) {
            if (phase == 1 && fenced) mk::ptx::fence_proxy_async_global();
            mk::ptx::mbarrier_arrive_expect_tx(bar, 256);
            mk::ptx::bulk_copy_to_shared(page, buf, 256, bar);
        }
        while (!mk::ptx::mbarrier_try_wait(bar, phase)) {
        }
        out[64 * phase + threadIdx.x % 64] = page[threadIdx.x % 64];
        __syncthreads();
        if (phase == 0 && threadIdx.x >= 32 && threadIdx.x < 64) buf[threadIdx.x] = -float(threadIdx.x);
        __syncthreads();
    }
}

// A block that holds all of an SM's shared memory until the host sets `release`.
__global__ void resident(const volatile uint32_t* release) {
    if (threadIdx.x == 0)
        while (cuda::atomic_ref<const uint32_t, cuda::thread_scope_system>(*const_cast<const uint32_t*>(release))
                   .load(cuda::memory_order_acquire) == 0)
            __nanosleep(1000);
    __syncthreads();
}
__global__ void tiny(uint32_t* out) { out[threadIdx.x] = 7; }

// Programmatic dependent launch. The primary's blocks release their dependent, then wait until the dependent's
// prologue has set `flag` (possible only if it starts before the primary ends), then write data[b] = 42 + b.
__global__ void pdl_primary(uint32_t* flag, uint32_t* data) {
    mk::ptx::griddep_launch_dependents();
    if (threadIdx.x != 0) return;
    while (cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*flag).load(cuda::memory_order_acquire) == 0)
        __nanosleep(100);
    data[blockIdx.x] = 42 + blockIdx.x;
}
// The dependent (one block): reads data[0] in its prologue (unfinished: the primary writes only after the flag),
// sets the flag, waits for the primary's end, then copies what the primary wrote.
__global__ void pdl_dependent(uint32_t* flag, const uint32_t* data, uint32_t* out, uint32_t n) {
    if (threadIdx.x != 0) return;
    out[n] = data[0];
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*flag).store(1, cuda::memory_order_release);
    mk::ptx::griddep_wait();
    for (uint32_t b = 0; b < n; ++b) out[b] = data[b];
}

template <typename Kernel, typename... A>
cudaError_t run(Kernel k, dim3 grid, dim3 block, size_t smem, A... args) {
    void* argv[] = {&args...};
    const cudaError_t e = cudaLaunchKernel(k, grid, block, argv, smem, nullptr);
    if (e != cudaSuccess) return e;
    return cudaDeviceSynchronize();
}

}  // namespace

TEST_CASE("emulator: shuffles, shared memory and __syncthreads sum like the hardware, under every seed", "[emu]") {
    for (uint64_t seed : {1, 2, 3}) {
        mk_emu::configure(small(seed));
        const uint32_t blocks = 6, threads = 128;
        std::vector<float> host(blocks * threads);
        for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 17) - 8.0f;
        float* in = device_array<float>(host.size());
        float* out = device_array<float>(blocks);
        REQUIRE(cudaMemcpy(in, host.data(), 4 * host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(run(block_sum, dim3(blocks), dim3(threads), 4 * threads / 32, static_cast<const float*>(in), out) == cudaSuccess);
        std::vector<float> got(blocks);
        REQUIRE(cudaMemcpy(got.data(), out, 4 * blocks, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (uint32_t b = 0; b < blocks; ++b) {
            double want = 0;
            for (uint32_t t = 0; t < threads; ++t) want += host[b * threads + t];
            CHECK(got[b] == Approx(want));
        }
        cudaFree(in);
        cudaFree(out);
    }
}

TEST_CASE("emulator: ballot, any, all and the shuffle variants", "[emu]") {
    mk_emu::configure(small(5));
    uint32_t* out = device_array<uint32_t>(160);
    REQUIRE(run(votes, dim3(1), dim3(32), 0, out) == cudaSuccess);
    std::vector<uint32_t> got(160);
    REQUIRE(cudaMemcpy(got.data(), out, 4 * 160, cudaMemcpyDeviceToHost) == cudaSuccess);
    uint32_t ballot = 0;
    for (uint32_t l = 0; l < 32; l += 3) ballot |= 1u << l;
    for (uint32_t l = 0; l < 32; ++l) {
        CHECK(got[l] == ballot);
        CHECK(got[32 + l] == 3u);
        CHECK(got[64 + l] == (l + 3 < 32 ? (l + 3) * 10 : l * 10));
        CHECK(got[96 + l] == (l >= 5 ? (l - 5) * 10 : l * 10));
        CHECK(got[128 + l] == (l / 8 * 8 + 7) * 10);
    }
    cudaFree(out);
}

TEST_CASE("emulator: a named barrier orders its warps, a count mismatch is reported", "[emu]") {
    mk_emu::configure(small(7));
    uint32_t* out = device_array<uint32_t>(256);
    REQUIRE(run(named_barrier, dim3(1), dim3(128), 0, out, 0) == cudaSuccess);
    std::vector<uint32_t> got(256);
    REQUIRE(cudaMemcpy(got.data(), out, 4 * 256, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (uint32_t t = 32; t < 128; ++t) CHECK(got[128 + t] == (t - 32 + 1) % 96 + 32 + 1000);

    CHECK(run(named_barrier, dim3(1), dim3(128), 0, out, 1) == cudaErrorLaunchFailure);
    // Whichever side arrives first, the report names both counts (the seed decides the order).
    CHECK_THAT(mk_emu::last_report(), Catch::Contains("bar.sync 1, ") && Catch::Contains("meets threads that arrived with count") &&
                                          Catch::Contains("96") && Catch::Contains("128"));
    cudaFree(out);
}

TEST_CASE("emulator: a barrier a warp never reaches is a deadlock report naming the warps and lines", "[emu]") {
    mk_emu::configure(small(9));
    int* out = device_array<int>(128);
    CHECK(run(missing_warp, dim3(2), dim3(128), 0, out) == cudaErrorLaunchFailure);
    const std::string r = mk_emu::last_report();
    CHECK_THAT(r, Catch::Contains("deadlock") && Catch::Contains("block 0") && Catch::Contains("warp 0") &&
                      Catch::Contains("emu_core_test.cpp") && Catch::Contains("96 of 128 threads arrived"));
    // The device is usable again afterwards.
    CHECK(run(block_sum, dim3(1), dim3(32), 16, static_cast<const float*>(reinterpret_cast<float*>(out)),
              reinterpret_cast<float*>(out)) == cudaSuccess);
    cudaFree(out);
}

TEST_CASE("emulator: a warp collective whose mask names lanes that never come is reported", "[emu]") {
    mk_emu::configure(small(11));
    float* out = device_array<float>(32);
    CHECK(run(half_mask, dim3(1), dim3(32), 0, out) == cudaErrorLaunchFailure);
    CHECK_THAT(mk_emu::last_report(), Catch::Contains("__shfl_xor_sync") && Catch::Contains("exited"));
    cudaFree(out);
}

TEST_CASE("emulator: a spin that nobody can end is reported with what it polls", "[emu]") {
    mk_emu::configure(small(13));
    uint32_t* flag = device_array<uint32_t>(1);
    REQUIRE(cudaMemset(flag, 0, 4) == cudaSuccess);
    CHECK(run(spin_forever, dim3(2), dim3(64), 0, flag) == cudaErrorLaunchFailure);
    CHECK_THAT(mk_emu::last_report(), Catch::Contains("deadlock") && Catch::Contains("__nanosleep") &&
                                          Catch::Contains("polling device allocation"));
    cudaFree(flag);
}

// A kernel launched with programmatic stream serialization starts once every block of the one before it ran
// griddepcontrol.launch_dependents, and its griddepcontrol.wait holds until that kernel ends: the primary here
// ends only because the dependent started early, a read before the wait sees the primary's memory unfinished,
// and the reads after it see all of it. Without the attribute the same pair is a deadlock, reported.
TEST_CASE("emulator: programmatic dependent launch overlaps the next kernel, griddepcontrol.wait orders it", "[emu]") {
    for (uint64_t seed : {41, 42, 43}) {
        mk_emu::configure(small(seed));
        constexpr uint32_t n = 3;
        uint32_t* flag = device_array<uint32_t>(1);
        uint32_t* data = device_array<uint32_t>(n);
        uint32_t* out = device_array<uint32_t>(n + 1);
        REQUIRE(cudaMemset(flag, 0, 4) == cudaSuccess);
        REQUIRE(cudaMemset(data, 0, 4 * n) == cudaSuccess);
        void* args[] = {&flag, &data};
        REQUIRE(cudaLaunchKernel(pdl_primary, dim3(n), dim3(64), args, 0, nullptr) == cudaSuccess);
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t config{dim3(1), dim3(32), 0, nullptr, attribute, 1};
        REQUIRE(cudaLaunchKernelEx(&config, pdl_dependent, flag, static_cast<const uint32_t*>(data), out, n) ==
                cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        std::vector<uint32_t> got(n + 1);
        REQUIRE(cudaMemcpy(got.data(), out, 4 * (n + 1), cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(got == std::vector<uint32_t>{42, 43, 44, 0});

        config.numAttrs = 0;  // an ordinary launch waits for the primary, which waits for it
        REQUIRE(cudaMemset(flag, 0, 4) == cudaSuccess);
        REQUIRE(cudaLaunchKernel(pdl_primary, dim3(n), dim3(64), args, 0, nullptr) == cudaSuccess);
        REQUIRE(cudaLaunchKernelEx(&config, pdl_dependent, flag, static_cast<const uint32_t*>(data), out, n) ==
                cudaSuccess);
        CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
        CHECK_THAT(mk_emu::last_report(), Catch::Contains("deadlock"));
        cudaFree(flag);
        cudaFree(data);
        cudaFree(out);
    }
}

TEST_CASE("emulator: one seed replays one interleaving exactly, seeds differ", "[emu]") {
    auto order = [](uint64_t seed) {
        mk_emu::configure(small(seed));
        uint32_t* counter = device_array<uint32_t>(1);
        uint32_t* log = device_array<uint32_t>(256);
        REQUIRE(cudaMemset(counter, 0, 4) == cudaSuccess);
        REQUIRE(run(race_log, dim3(4), dim3(64), 0, counter, log) == cudaSuccess);
        std::vector<uint32_t> got(256);
        REQUIRE(cudaMemcpy(got.data(), log, 4 * 256, cudaMemcpyDeviceToHost) == cudaSuccess);
        cudaFree(counter);
        cudaFree(log);
        return got;
    };
    const auto a = order(21), b = order(21), c = order(22);
    CHECK(a == b);
    CHECK(a != c);
    std::vector<uint32_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < 256; ++i) CHECK(sorted[i] == i);
}

TEST_CASE("emulator: bulk copies land asynchronously into shared memory, their rules checked", "[emu]") {
    for (uint64_t seed : {31, 32}) {
        mk_emu::configure(small(seed));
        float* src = device_array<float>(128);
        float* out = device_array<float>(64);
        std::vector<float> host(128);
        for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) + 0.5f;
        REQUIRE(cudaMemcpy(src, host.data(), 4 * 128, cudaMemcpyHostToDevice) == cudaSuccess);
        std::vector<float> got(64);
        auto launch = [&](CopyDefect d) {
            return run(bulk_copy, dim3(1), dim3(64), 128 + 256, static_cast<const float*>(src), out, int(d));
        };
        REQUIRE(launch(CopyDefect::none) == cudaSuccess);
        REQUIRE(cudaMemcpy(got.data(), out, 4 * 64, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (uint32_t i = 0; i < 64; ++i) CHECK(got[i] == host[i]);

        // A consumer that reads the page before its wait sees poison (NaN), not data.
        REQUIRE(launch(CopyDefect::read_before_wait) == cudaSuccess);
        REQUIRE(cudaMemcpy(got.data(), out, 4 * 64, cudaMemcpyDeviceToHost) == cudaSuccess);
        uint32_t poisoned = 0;
        for (float v : got) poisoned += std::isnan(v);
        CHECK(poisoned > 0);

        CHECK(launch(CopyDefect::misaligned) == cudaErrorLaunchFailure);
        CHECK_THAT(mk_emu::last_report(), Catch::Contains("not 16-byte aligned"));
        CHECK(launch(CopyDefect::no_expect_tx) == cudaErrorLaunchFailure);
        CHECK_THAT(mk_emu::last_report(), Catch::Contains("expect_tx missing or too small"));
        CHECK(launch(CopyDefect::short_expect_tx) == cudaErrorLaunchFailure);
        CHECK_THAT(mk_emu::last_report(), Catch::Contains("expects only 128"));
        CHECK(launch(CopyDefect::outside_smem) == cudaErrorLaunchFailure);
        CHECK_THAT(mk_emu::last_report(), Catch::Contains("not inside the block's shared memory"));
        cudaFree(src);
        cudaFree(out);
    }
}

TEST_CASE("emulator: a bulk copy of global memory that generic stores wrote since the last fence.proxy.async is "
          "reported", "[emu]") {
    for (uint64_t seed : {51, 52}) {
        mk_emu::configure(small(seed));
        float* buf = device_array<float>(64);
        float* out = device_array<float>(128);
        std::vector<float> host(64), got(128);
        for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) + 0.25f;
        for (int fenced : {1, 0}) {
            INFO("seed " << seed << (fenced ? " fenced" : " unfenced"));
            REQUIRE(cudaMemcpy(buf, host.data(), 4 * 64, cudaMemcpyHostToDevice) == cudaSuccess);
            const cudaError_t e = run(copy_after_store, dim3(1), dim3(64), 128 + 256, buf, out, fenced);
            if (fenced) {
                REQUIRE(e == cudaSuccess);
                REQUIRE(cudaMemcpy(got.data(), out, 4 * 128, cudaMemcpyDeviceToHost) == cudaSuccess);
                for (uint32_t i = 0; i < 64; ++i) {
                    CHECK(got[i] == host[i]);
                    CHECK(got[64 + i] == (i >= 32 ? -float(i) : host[i]));
                }
            } else {
                CHECK(e == cudaErrorLaunchFailure);
                CHECK_THAT(mk_emu::last_report(), Catch::Contains("written by generic stores") &&
                                                      Catch::Contains("after this thread's last fence.proxy.async") &&
                                                      Catch::Contains("emu_core_test.cpp"));
            }
        }
        // The host may rewrite watched memory between launches (a launch orders it before the kernel's copies).
        REQUIRE(cudaMemcpy(buf, host.data(), 4 * 64, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(run(copy_after_store, dim3(1), dim3(64), 128 + 256, buf, out, 1) == cudaSuccess);
        cudaFree(buf);
        cudaFree(out);
    }
}

TEST_CASE("emulator: shared memory limits and residency are the device's", "[emu]") {
    mk_emu::configure(small(41, 2));
    uint32_t* out = device_array<uint32_t>(64);
    // Past 48 KiB a kernel must opt in, and never past the device's 227 KiB.
    CHECK(run(tiny, dim3(1), dim3(32), 64 * 1024, out) == cudaErrorInvalidValue);
    CHECK(cudaFuncSetAttribute(tiny, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448 + 16) == cudaErrorInvalidValue);
    REQUIRE(cudaFuncSetAttribute(tiny, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448) == cudaSuccess);
    CHECK(run(tiny, dim3(1), dim3(32), 232448, out) == cudaSuccess);

    // A persistent grid holds both SMs' shared memory; a cooperative grid beside it can never start.
    REQUIRE(cudaFuncSetAttribute(resident, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024) == cudaSuccess);
    uint32_t* release = nullptr;
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&release), 4, cudaHostAllocMapped) == cudaSuccess);
    *release = 0;
    cudaStream_t a = nullptr, b = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
    const volatile uint32_t* rel = release;
    void* args_a[] = {&rel};
    REQUIRE(cudaLaunchCooperativeKernel(resident, dim3(2), dim3(64), args_a, 200 * 1024, a) == cudaSuccess);
    CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
    void* args_b[] = {&out};
    REQUIRE(cudaLaunchCooperativeKernel(tiny, dim3(2), dim3(32), args_b, 40 * 1024, b) == cudaSuccess);
    CHECK(cudaStreamSynchronize(b) == cudaErrorLaunchFailure);
    CHECK_THAT(mk_emu::last_report(), Catch::Contains("can never become resident") && Catch::Contains("cooperative"));
    // The host ends the resident grid; its stream drains.
    *release = 1;
    CHECK(cudaStreamSynchronize(a) == cudaSuccess);
    // More blocks than the device can ever hold at once is refused at launch.
    CHECK(cudaLaunchCooperativeKernel(resident, dim3(3), dim3(64), args_a, 200 * 1024, a) ==
          cudaErrorCooperativeLaunchTooLarge);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaFreeHost(release);
    cudaFree(out);
}

namespace {

// The truncated-sums model of the MMA twin on hand-computed sums: c = 1 and 16 products of 3/4 of 1's last place
// (2^-23): cut to the largest term's place each product is 0, so 1 exactly; rounded in k order each add rounds up to
// the next place, 1 + 16 places; the exact sum is 1 + 12 places.
TEST_CASE("emulator: the MMA twin's truncated sums cut each term and the sum toward zero", "[emu]") {
    const float place = std::ldexp(1.0f, -23);
    float products[16];
    std::fill(std::begin(products), std::end(products), 0.75f * place);
    CHECK(mk_emu::truncated_sum(1.0f, products) == 1.0f);
    float rounded = 1.0f;
    for (float p : products) rounded += p;
    CHECK(rounded == 1.0f + 16 * place);
    // Of the other sign, toward zero too: -1 stays -1.
    std::fill(std::begin(products), std::end(products), -0.75f * place);
    CHECK(mk_emu::truncated_sum(-1.0f, products) == -1.0f);
    // Terms at the largest's place are kept exactly: 1 + 16 x 2^-23, then the sum cut (it stays below 2).
    std::fill(std::begin(products), std::end(products), place);
    CHECK(mk_emu::truncated_sum(1.0f, products) == 1.0f + 16 * place);
    // A sum that grows a binade loses its new last bit: 1.5 x 2 + 2^-23 is 3 + 2^-23, and 3's place is 2^-22.
    std::fill(std::begin(products), std::end(products), 0.0f);
    products[0] = 1.5f, products[1] = 1.5f, products[2] = place;
    CHECK(mk_emu::truncated_sum(0.0f, products) == 3.0f);
    // All zero; and NaN and infinity pass through as the IEEE sum.
    std::fill(std::begin(products), std::end(products), 0.0f);
    CHECK(mk_emu::truncated_sum(0.0f, products) == 0.0f);
    CHECK(std::isnan(mk_emu::truncated_sum(std::nanf(""), products)));
    products[3] = INFINITY;
    CHECK(mk_emu::truncated_sum(1.0f, products) == INFINITY);
}

}  // namespace

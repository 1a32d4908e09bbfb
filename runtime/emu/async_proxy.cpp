// The emulator's check of the async proxy: a cp.async.bulk must not read global memory that generic stores
// wrote after the issuing thread's last fence.proxy.async (the copy may see stale bytes on the hardware).
// Plain stores are invisible to the emulator, so the pages a bulk copy has read are write-protected: the
// first store into one after each fence (any thread's) faults into the handler below, which stamps the page
// with the async-proxy clock and lets the store through. Every fence re-arms the pages written since, so a
// copy whose thread fenced before a page's last stamp read bytes written after that fence. Pages are
// watched from their first bulk read on (a store before any copy of its page is not seen).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "runtime/emu/engine.hpp"

namespace mk_emu {

namespace {

struct sigaction g_previous {};

void protect(uintptr_t page, bool read_only) {
    if (mprotect(reinterpret_cast<void*>(page), Engine::page_bytes(), read_only ? PROT_READ : PROT_READ | PROT_WRITE) != 0) {
        std::perror("mk_emu: mprotect");
        std::abort();  // the emulator's own invariant: every watched page is a whole page of an allocation
    }
}

// A store into an armed page: stamp it and let the store through. Anything else goes to the previous handler.
// It runs synchronously on the faulting thread (a device fiber or the host inside an API call, both under
// the engine's lock), never inside the allocator, so touching the engine's maps here is safe.
void on_segv(int sig, siginfo_t* info, void* context) {
    Engine& e = engine();
    const uintptr_t page = reinterpret_cast<uintptr_t>(info->si_addr) & ~uintptr_t(Engine::page_bytes() - 1);
    auto it = e.watched.find(page);
    if (it != e.watched.end() && it->second.armed) {
        WatchedPage& w = it->second;
        w.armed = false;
        if (e.current) {  // a device store (a host copy is ordered before the next launch, which fences)
            w.written_at = ++e.async_clock;
            w.writer_block = e.current->block->index;
            w.writer_tid = e.current->tid;
        }
        e.dirty.push_back(page);
        protect(page, false);
        return;
    }
    if (g_previous.sa_flags & SA_SIGINFO) {
        g_previous.sa_sigaction(sig, info, context);
        return;
    }
    if (g_previous.sa_handler == SIG_IGN) return;
    if (g_previous.sa_handler != SIG_DFL) {
        g_previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);  // the fault re-raises on return and ends the process as it would have
}

}  // namespace

// Others install SIGSEGV handlers too (Catch2 around every test case, ASan at start): before any store can
// meet an armed page, the handler in place must be this one, chaining to whatever was there.
void Engine::ensure_segv_handler() {
    if (watched.empty()) return;
    struct sigaction current {};
    sigaction(SIGSEGV, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_segv) return;
    struct sigaction sa {};
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
}

size_t Engine::page_bytes() {
    static const size_t bytes = size_t(sysconf(_SC_PAGESIZE));
    return bytes;
}

void Engine::check_async_read(const void* src, uint32_t bytes, Where where) {
    Thread& t = *current;
    uintptr_t base = 0;
    const Allocation* a = find(src, &base);
    if (!a || a->kind != AllocKind::device) return;  // host-mapped memory is not watched
    const uintptr_t first = reinterpret_cast<uintptr_t>(src) & ~uintptr_t(page_bytes() - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(src) + bytes;
    for (uintptr_t page = first; page < end; page += page_bytes()) {
        auto it = watched.find(page);
        if (it == watched.end()) continue;
        const WatchedPage& w = it->second;
        if (w.written_at > t.async_fence_at)
            fault("cp.async.bulk at " + where_text(where) + " reads " + describe(src) + ", " + std::to_string(bytes) +
                  " bytes, of which the page at " + describe(reinterpret_cast<const void*>(std::max(page, base))) +
                  " was written by generic stores (block " + std::to_string(w.writer_block) + " thread " +
                  std::to_string(w.writer_tid) + ") after this thread's last fence.proxy.async: the async proxy may "
                  "read stale bytes (acquire, then fence.proxy.async, then copy)");
    }
    for (uintptr_t page = first; page < end; page += page_bytes()) {
        WatchedPage& w = watched[page];
        if (!w.armed) {
            w.armed = true;
            protect(page, true);
        }
    }
    ensure_segv_handler();
}

void Engine::rearm_watched() {
    ensure_segv_handler();
    for (uintptr_t page : dirty) {
        auto it = watched.find(page);
        if (it == watched.end() || it->second.armed) continue;
        it->second.armed = true;
        protect(page, true);
    }
    dirty.clear();
}

void Engine::fence_async() {
    current->async_fence_at = ++async_clock;
    rearm_watched();
}

void Engine::unwatch(uintptr_t base, size_t bytes) {
    auto it = watched.lower_bound(base);
    while (it != watched.end() && it->first < base + bytes) {
        if (it->second.armed) protect(it->first, false);
        it = watched.erase(it);
    }
}

}  // namespace mk_emu

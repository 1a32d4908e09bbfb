// The NCCL loader (see nccl_library.hpp).
#include "runtime/cuda/nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include <fmt/format.h>

#if MK_HAVE_NCCL_HEADERS
#include <nccl.h>
#endif

namespace mk::cuda {

namespace {

#if MK_HAVE_NCCL_HEADERS
constexpr int kHeaderVersion = NCCL_VERSION_CODE;
#else
constexpr int kHeaderVersion = 0;
#endif

// The host functions the multi-GPU path needs: communicators for the local GPUs, the symmetric window.
constexpr const char* kRequired[] = {"ncclGetVersion",         "ncclGetErrorString",       "ncclCommInitAll",
                                     "ncclCommDestroy",        "ncclMemAlloc",             "ncclMemFree",
                                     "ncclCommWindowRegister", "ncclCommWindowDeregister", "ncclGroupStart",
                                     "ncclGroupEnd"};

void* g_handle = nullptr;  // set once the library proved usable

NcclStatus load() {
    NcclStatus s;
    s.header_version = kHeaderVersion;
    const char* env = std::getenv("MK_NCCL_LIBRARY");
    s.library = env && *env ? env : "libnccl.so.2";
    if (kHeaderVersion == 0) {
        s.message = "this mk was built without NCCL headers (set MK_NCCL_INCLUDE_DIR)";
        return s;
    }
    void* handle = dlopen(s.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        s.message = fmt::format("{}: cannot load ({})", s.library, why ? why : "unknown error");
        return s;
    }
    for (const char* name : kRequired)
        if (!dlsym(handle, name)) {
            s.message = fmt::format("{}: lacks {} (NCCL 2.27 or newer has every function mk uses)", s.library, name);
            return s;
        }
    using GetVersion = int (*)(int*);
    const auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "ncclGetVersion"));
    if (get_version(&s.version) != 0) {
        s.message = fmt::format("{}: ncclGetVersion failed", s.library);
        return s;
    }
    if (s.version / 100 != kHeaderVersion / 100) {
        s.message = fmt::format("{}: version {}, but this mk was built against the {} headers; build against the "
                                "headers of the NCCL that runs it (MK_NCCL_INCLUDE_DIR)",
                                s.library, nccl_version_string(s.version), nccl_version_string(kHeaderVersion));
        return s;
    }
    s.usable = true;
    g_handle = handle;
    s.message = fmt::format("{} {} (built against {} headers)", s.library, nccl_version_string(s.version),
                            nccl_version_string(kHeaderVersion));
    return s;  // the handle stays open for the process's life
}

}  // namespace

std::string nccl_version_string(int code) {
    return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

NcclStatus probe_nccl() {
    static const NcclStatus status = load();
    return status;
}

void* nccl_symbol(const char* name) {
    return probe_nccl().usable ? dlsym(g_handle, name) : nullptr;
}

}  // namespace mk::cuda

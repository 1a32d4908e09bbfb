// NCCL, loaded at run time (dlopen) and only by tensor parallelism across GPUs, so CPU and single-GPU
// runs never depend on it. mk is compiled against one NCCL's headers (MK_NCCL_INCLUDE_DIR, default the
// CUDA toolkit's); their device API (nccl_device.h) is still marked experimental in 2.28, so a library
// of another major.minor version than the headers is refused rather than trusted.
#pragma once
#include <string>

namespace mk::cuda {

struct NcclStatus {
    bool usable = false;      // loaded, the same major.minor as the headers, every function mk calls present
    std::string library;      // what was loaded: $MK_NCCL_LIBRARY, else libnccl.so.2
    int version = 0;          // ncclGetVersion(): major * 10000 + minor * 100 + patch
    int header_version = 0;   // of the headers this build used; 0 when built without them
    std::string message;      // what it is, or why it is not usable
};

// Never throws. Loads the library once per process; later calls return the first answer.
NcclStatus probe_nccl();
// A function of the loaded library (one of those probe_nccl checked), or null when it is not usable.
void* nccl_symbol(const char* name);
// "2.28.9" from 22809.
std::string nccl_version_string(int code);

}  // namespace mk::cuda

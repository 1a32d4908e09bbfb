// A backend of the registry-driven op test: runs one instruction on an OpBuffers (instructions/op_reference.hpp)
// in place. The CPU ops are one; the CUDA emulator's device ops join as another (docs/architecture.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "instructions/op_reference.hpp"

namespace mk {

class OpBackend {
public:
    virtual ~OpBackend() = default;
    virtual std::string name() const = 0;
    // The backend's own relative error on top of the op's tolerance for a case (an approximation it documents).
    virtual double extra_rel(const Instruction&, const OpBuffers&) const { return 0.0; }
    // Whether the backend runs this case (a device backend refuses weight formats its device code does not
    // decode, and ops without device code, as its program's upload does); the op test names the cases a backend skips.
    virtual bool accepts(const Instruction&, const OpBuffers&) const { return true; }
    // Runs `ins` on `buffers` (arena, weights, caches, step) as the backend's interpreter would; throws mk::Error.
    virtual void run(const Instruction& ins, OpBuffers& buffers) = 0;
};

// The CPU ops (run_cpu) with tiles staged through checked pages, in the given dot mode.
std::unique_ptr<OpBackend> make_cpu_op_backend(CpuDots dots);

// The ops' device code on the CUDA emulator (tests/emu/emu_op_backend.cpp; builds without sanitizers), its MMAs'
// sums rounded to nearest in k order or cut toward zero as tensor cores are measured to (mk_emu/mma.hpp).
std::unique_ptr<OpBackend> make_emu_op_backend(bool truncated_mma_sums = false);

// Every backend this build has.
std::vector<std::unique_ptr<OpBackend>> op_backends();

}  // namespace mk

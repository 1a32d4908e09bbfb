// A schedule as a backend runs it: validated against the program's memory once, with each
// instruction's op, page plan and (for the race detector) memory accesses precomputed. Shared by the
// CPU interpreter and the CUDA upload (runtime/cuda/upload_layout.hpp), so both refuse the same schedules.
#pragma once
#include <cstdint>
#include <vector>

#include "instructions/registry.hpp"
#include "runtime/program_memory.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

struct PreparedInstruction {
    const Instruction* ins = nullptr;
    const OpInfo* op = nullptr;
    const PagePlan* plan = nullptr;
    uint32_t flat = 0;  // index over all streams, in stream order
};

struct PreparedSchedule {
    std::vector<PagePlan> plans;                             // by flat index
    std::vector<std::vector<PreparedInstruction>> streams;   // by SM, pointing into the schedule and plans
    std::vector<std::vector<Access>> accesses;               // by flat index; empty unless asked for
};

// Throws mk::Error naming the instruction ("sm N #i (describe): ...") for anything the
// interpreter could not run safely. The result points into `schedule`, which must outlive it.
PreparedSchedule prepare_schedule(const Schedule& schedule, const ProgramMemory& memory, bool check_pages,
                                  bool keep_accesses);

}  // namespace mk

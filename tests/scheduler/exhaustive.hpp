// The verifier's independent oracle: explicit-state exploration of every interleaving of a small
// schedule over n steps (state = the program counter of every stream; counters follow from them).
#pragma once
#include <string>

#include "scheduler/schedule.hpp"

namespace mk::test {

struct Exploration {
    bool race = false;      // some reachable state lets an instruction start while a conflicting,
                            // sequentially earlier one has not finished
    bool deadlock = false;  // some reachable state has nothing enabled before every stream is done
    size_t n_states = 0;
    std::string example;  // the first race found, for failure messages
};

// Steps use positions 2, 4, 6, ... so at_pos rows of different steps differ and upto_pos grows.
Exploration explore(const Schedule& schedule, uint32_t n_steps);

}  // namespace mk::test

// The plain records the host and the resident kernel exchange: the command the host posts (a run of
// steps), the mailbox in pinned host memory (commands in; sampled tokens, progress and the watchdog's
// fault record out), the device-side control block, and per-instruction trace records.
#pragma once
#include <cstdint>

namespace mk {

inline constexpr uint32_t kMaxStopTokens = 8;
inline constexpr uint32_t kTokenRing = 4096;  // sampled token of step s lands in ring[s % kTokenRing]

enum class CommandKind : uint32_t { run = 0, exit = 1 };

// Steps [0, n_steps) run at positions pos0 + s and epochs epoch0 + s. Step s's input token is
// tokens[s] while s < n_tokens, else the token sampled by step s - 1 (on the device, no host round trip).
// The run ends early after a step that samples one of stop_tokens, or when the host sets `cancel`.
struct Command {
    uint32_t kind;
    uint32_t n_steps;
    uint32_t epoch0;
    int32_t pos0;
    const int32_t* tokens;  // device-visible (mapped pinned) memory
    uint32_t n_tokens;
    uint32_t n_stop;
    int32_t stop_tokens[kMaxStopTokens];
};

// Written by the first wait that exceeds the watchdog bound; `flag` last (after a system fence).
struct FaultRecord {
    uint32_t flag;  // 0: none, 1: watchdog, 2: the host asked for an abort
    uint32_t sm, index, opcode;
    uint32_t counter, epoch;
    uint64_t value, target;
    uint64_t waited_ns;
};

// Pinned, mapped host memory: the host writes `command` then bumps `command_seq`; the device answers.
struct Mailbox {
    Command command;
    volatile uint32_t command_seq;
    volatile uint32_t cancel;      // host: stop the current run after the running step
    volatile uint32_t host_abort;  // host: abandon everything (the kernel ends with fault flag 2)
    volatile uint32_t steps_done;  // device: steps of the current command finished (token posted)
    volatile uint32_t run_done;    // device: the seq of the last command finished
    volatile uint32_t stopped;     // device: the run ended early (stop token or cancel)
    FaultRecord fault;
    int32_t tokens[kTokenRing];
};

// Device memory, zeroed at launch of a fresh kernel.
struct DeviceControl {
    uint32_t abort;         // any role that sees it non-zero ends
    uint32_t fault_claimed; // the first faulting waiter wins the right to write the record
    uint32_t command_seq;   // block 0 copies a posted command here for the other blocks
    uint32_t steps_done;    // steps of the current command whose token is sampled
    uint32_t stop;          // the step that finished last ended the run
    uint32_t blocks_done;   // blocks that finished their part of a command, over the kernel's life
    uint32_t pad[2];
    Command command;
};

// One record per instruction run while tracing (nanoseconds of %globaltimer; 0: did not happen).
struct TraceRecord {
    uint64_t start;       // the consumers took the instruction
    uint64_t ready;       // its waits were met
    uint64_t end;         // its signals were sent
    uint64_t load_start;  // the loader issued its first tile
    uint64_t load_end;    // the consumers saw its last tile arrive
};

}  // namespace mk

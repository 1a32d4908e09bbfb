// The fixed-size instruction record every backend executes: 32 little-endian u32 words holding the
// opcode, up to kMaxWaits (counter, target) waits each naming the operand it guards, up to
// kMaxSignals (counter, delta) signals, the page demand, and op-specific argument words.
// Plain data, usable on host and device (no constructors, no virtuals).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MK_HOST_DEVICE __host__ __device__
#else
#define MK_HOST_DEVICE
#endif

namespace mk {

inline constexpr int kInstructionWords = 32;
inline constexpr int kMaxWaits = 4;
inline constexpr int kMaxSignals = 2;
inline constexpr int kMaxArgs = 16;
inline constexpr uint16_t kNoOperand = 0xffff;

// Arena buffers, each rank's arena region, weight-blob entries and the counters after a peer buffer start on
// 256-byte boundaries, the alignment cudaMalloc gives: an offset into them is as aligned as a fresh
// allocation (bulk copies need 16 bytes, the ops' vector loads 32).
inline constexpr uint64_t kBufferAlignBytes = 256;
constexpr uint64_t align_up(uint64_t bytes, uint64_t align) { return (bytes + align - 1) / align * align; }

// Which operand of the instruction a wait guards. Loads of other operands (weights, old KV entries)
// may start before the wait is met; only reads of the guarded operand must follow it.
enum class Operand : uint16_t {
    input = 0,      // the activation vector the op reads (residual, attention output, MLP activation)
    kv_cache = 1,   // the KV cache entries written this step
    partials = 2,   // attention or split-K partial results
    output = 3,     // the region the op writes (write-after-read ordering against earlier readers)
    logits = 4,
    token = 5,      // the step's input token
};

struct Wait {
    uint16_t counter;
    uint16_t operand;  // an Operand value
    uint32_t target;   // per-step target: the wait is met when counter >= epoch * step_total + target
};

struct Signal {
    uint16_t counter;
    uint16_t delta;
};

// 128 bytes: words 0..2 header, 3..10 waits, 11..12 signals, 13..15 reserved, 16..31 args.
struct Instruction {
    uint16_t opcode;
    uint8_t n_waits;
    uint8_t n_signals;
    uint8_t n_pages;       // shared-memory pages the op needs (from its page plan)
    uint8_t flags;
    uint16_t reserved0;
    uint32_t seq;          // position in the step's sequential meaning (what the verifier orders by)
    Wait waits[kMaxWaits];
    Signal signals[kMaxSignals];
    uint32_t reserved1[3];
    uint32_t args[kMaxArgs];
};
static_assert(sizeof(Wait) == 8);
static_assert(sizeof(Signal) == 4);
static_assert(sizeof(Instruction) == kInstructionWords * 4, "the record is 32 u32 words");

// Op argument structs are encoded into Instruction::args word by word; each op's spec defines
// its own struct with encode()/decode() through these two helpers.
template <typename Args>
MK_HOST_DEVICE inline void encode_args(const Args& args, Instruction& instruction) {
    static_assert(sizeof(Args) <= sizeof(instruction.args) && sizeof(Args) % 4 == 0, "args must fit the record");
    memcpy(instruction.args, &args, sizeof(Args));
}

template <typename Args>
MK_HOST_DEVICE inline Args decode_args(const Instruction& instruction) {
    static_assert(sizeof(Args) <= sizeof(instruction.args) && sizeof(Args) % 4 == 0, "args must fit the record");
    // Word loads first: a memcpy straight from the record compiles to one byte load per byte on the device
    // (nvcc cannot see the record's alignment: ~540 LDG.E.U8 in the interpreter); the copy between locals
    // stays in registers.
    uint32_t words[sizeof(Args) / 4];
    for (uint32_t i = 0; i < sizeof(Args) / 4; ++i) words[i] = instruction.args[i];
    Args args{};
    memcpy(&args, words, sizeof(Args));
    return args;
}

}  // namespace mk

// What every CUDA Program uploads: the repacked weights, the schedule's upload layout, the activation
// arena and the KV caches, with the checks that refuse what the device cannot hold (before allocating).
// Host code over the CUDA runtime; device memory is owned by DeviceBuffer.
#pragma once
#include "runtime/cuda/backend_namespace.hpp"
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "instructions/device_types.hpp"
#include "instructions/op_context.hpp"
#include "models/model.hpp"
#include "runtime/cuda/upload_layout.hpp"
#include "scheduler/schedule.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

// Throws mk::Error with `what` and the CUDA error text when status (a cudaError_t) is not success.
void check_cuda(int status, const char* what);
// Whether the device code decodes this weight format (F32, F16, BF16, Q8_0, Q4_0, Q4_1; uploads refuse others).
bool device_supports(DType dtype);

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(uint64_t bytes, const char* what);  // zero-filled
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) { other.data_ = nullptr; }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    void upload(const void* host, uint64_t bytes, const char* what);
    template <typename T>
    T* as() const { return static_cast<T*>(data_); }
    uint64_t bytes() const { return bytes_; }
    void leak() { data_ = nullptr; }  // a kernel that would not end may still use it: never freed

private:
    void* data_ = nullptr;
    uint64_t bytes_ = 0;
};

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    uint32_t sm_count = 0, major = 0, minor = 0;
    uint64_t smem_optin = 0;
    uint64_t free_bytes = 0, total_bytes = 0;
};
// The current device; throws mk::Error when there is none (no driver, no GPU).
DeviceInfo current_device();

// A rank's activations, KV caches and counters (see RankMemory).
struct RankBuffers {
    DeviceBuffer arena, k_cache, v_cache, counters;
};

// Where a tensor-parallel schedule's ranks keep their memory on this device.
enum class RankLayout {
    shared,    // every rank here, one allocation of each holding every rank's region (baseline, op tests)
    separate,  // every rank here (--tp-loopback), one allocation per rank: only a transfer reaches a peer's
    one_rank,  // one rank on this GPU, its peers on others: its streams, its weights, its memory
};

struct RankPlacement {
    RankLayout layout = RankLayout::shared;
    uint32_t rank = 0;  // one_rank: which
    // one_rank, optional: the rank's arena region and counters in memory its peers can write (its NCCL
    // window), exchange_arena_bytes and exchange_counter_bytes long; null: allocated here.
    uint8_t* exchange_arena = nullptr;
    uint64_t* exchange_counters = nullptr;
};
uint64_t exchange_arena_bytes(const Schedule& schedule);    // one rank's region, plus slack for 16-byte copies
uint64_t exchange_counter_bytes(const Schedule& schedule);  // a whole counter array

struct DeviceState {
    Schedule schedule;
    uint32_t ctx_len = 0;
    PreparedSchedule prepared;  // points into schedule
    UploadLayout layout;
    DeviceBuffer blob, weights, rope;
    DeviceBuffer instructions, stream_begin, tile_begin, tiles, release_begin;
    RankPlacement placement;
    std::vector<RankBuffers> ranks;  // one (shared, one_rank) or one per rank (separate); arena and counters
                                     // are empty when the placement gave exchange memory
    std::vector<RankMemory> rank_memory;  // by rank, as uploaded to rank_table
    DeviceBuffer rank_table;
    DeviceBuffer sync_slots;  // SyncSlots by instruction (interpreter.hpp)
    DeviceOpContext ctx{};  // the first rank's memory (rank 0's but one_rank); pos, token, scratch left for the launcher
    uint64_t weight_bytes = 0;
    WeightBlob blob_index;  // where each weight sits in `blob` (offsets and table; the bytes are not kept)
    // A prefill step's state (upload_prefill_state): the decode state whose weights, RoPE table and KV caches
    // it runs over; its own are empty. Null for a decode state.
    const DeviceState* weights_of = nullptr;

    // The weight blob the tiles' source offsets count from (the decode state's, for a prefill state).
    const uint8_t* weight_blob() const { return (weights_of ? weights_of->blob : blob).as<uint8_t>(); }

    // What every CUDA Program's step() checks first: the position is in the context and follows the
    // previous one, the token is in the vocabulary.
    void check_step(int32_t token, int32_t pos, uint32_t next_pos) const;
    // What every CUDA Program's prefill() does first: checks a chunk (1 to prefill_tokens tokens in the
    // vocabulary, at positions in the context from next_pos) and writes its tokens where the step reads them.
    void post_chunk(std::span<const int32_t> tokens, int32_t pos, uint32_t next_pos) const;
    // After a prefill step of n tokens: the last token's logits, or with `every` (all_logits) (n, vocab).
    std::span<const float> chunk_logits(uint32_t n, bool every) const;
    // The last step's logits, copied from the device once per step (new_step() forgets the copy): `rows`
    // rows of vocab from logits_off (a prefill step with all logits keeps one row per chunk token).
    std::span<const float> host_logits(uint32_t rows = 1) const;
    void new_step() { logits_rows = 0; }
    // one_rank: where peer `rank`'s region of the arena (its first byte) and its counters are, as this device
    // addresses them (an NCCL peer pointer, or the peer's own pointer under CUDA peer access).
    void set_peer(uint32_t rank, uint8_t* arena_region, uint64_t* counters);
    // The ranks this device runs: [first_rank(), first_rank() + n_ranks_here()) (all but one_rank: every rank).
    uint32_t first_rank() const;
    uint32_t n_ranks_here() const;
    // Zeroes the counters of the ranks this device runs (after a fault, with the kernel ended).
    void reset_counters() const;
    // The arena offset of the token this device's kernel hands to the host: its first rank's sample.
    uint32_t posted_token_off() const;
    // The step's token: the device's greedy pick, or the shared sampling rule over the logits on the host.
    int32_t sampled_token(int32_t device_token, const SamplingParams& params, std::span<const int32_t> history,
                          int32_t pos) const;

private:
    mutable std::vector<float> logits;
    mutable uint32_t logits_rows = 0;  // rows held by `logits`; 0: none copied since new_step()
};

// Binds, repacks and uploads. Throws mk::Error naming the model file for unsupported weight formats,
// a schedule whose rows are not padded for bulk copies, or memory the device does not have.
// With RankLayout::one_rank, call on the rank's device (cudaSetDevice) and read only rank 0's logits.
std::unique_ptr<DeviceState> upload_program_state(const Model& model, Schedule schedule, uint32_t ctx_len,
                                                  const RankPlacement& placement = {});
// A prefill schedule (compile_prefill_schedule, same model, target and weight formats) over `decode`'s uploaded
// weights and KV caches: only its layout, activation arenas and counters are uploaded, placed as `decode`'s ranks
// are (one set, one per rank, or with RankLayout::one_rank the rank's own streams and memory: call on its device,
// then set_peer for every peer). exchange_arena and exchange_counters, one_rank only and optional: the rank's
// prefill region and counters in memory its peers can write (exchange_arena_bytes(prefill) and
// exchange_counter_bytes(prefill) long); null: allocated here. `decode` must outlive it.
std::unique_ptr<DeviceState> upload_prefill_state(const Model& model, Schedule prefill, const DeviceState& decode,
                                                  uint8_t* exchange_arena = nullptr, uint64_t* exchange_counters = nullptr);

MK_CUDA_BACKEND_END
}  // namespace mk

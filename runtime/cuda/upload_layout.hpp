// What the CUDA backend uploads, built and checked on the host (and tested on the CPU): the weights
// as one blob of 16-byte-aligned rows, and the schedule as flat arrays the kernel indexes — every
// stream's instructions, each instruction's tiles (source offset, bytes, rows) and page release order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "instructions/device_types.hpp"
#include "runtime/prepare.hpp"
#include "runtime/model_weights.hpp"
#include "scheduler/schedule.hpp"

namespace mk {

inline constexpr uint32_t kDeviceRowAlign = 16;  // bulk copies move multiples of 16 bytes from 16-byte addresses

struct WeightBlob {
    std::vector<uint8_t> bytes;
    std::vector<uint64_t> offsets;      // by weight id; kAbsent for weights the model lacks
    std::vector<DeviceWeight> weights;  // by weight id, data relative to the blob's start (see device_weights)
    static constexpr uint64_t kAbsent = ~uint64_t(0);
};

// Copies every bound weight into one blob, each at a kBufferAlignBytes (256-byte) boundary. Throws mk::Error when a matrix's
// row stride is not a multiple of kDeviceRowAlign (compile the schedule with padded_row_formats).
WeightBlob build_weight_blob(const std::vector<WeightRef>& refs);
// The weight table with pointers into a copy of the blob at `base` (the device's, once uploaded).
std::vector<DeviceWeight> device_weights(const WeightBlob& blob, const uint8_t* base);

// A page plan's tile as the device reads it: its first byte in the blob (an MMA tile's first row piece). Throws
// mk::Error, naming `what` (the instruction), when the weight is not in the blob or a copy is not 16-byte aligned.
DeviceTile device_tile(const Tile& tile, const WeightBlob& blob, const std::string& what);

struct UploadLayout {
    std::vector<Instruction> instructions;  // stream 0's, then stream 1's, ...
    std::vector<uint32_t> stream_begin;     // n_sms + 1: stream s is instructions [begin[s], begin[s+1])
    std::vector<uint32_t> tile_begin;       // n_instructions + 1, into tiles
    std::vector<DeviceTile> tiles;
    std::vector<uint32_t> release_begin;    // n_instructions + 1, into release_order
    std::vector<uint8_t> release_order;     // each instruction's page slots in the order it frees them
    uint32_t max_pages = 0;                 // the most pages one instruction holds
    uint64_t max_tile_bytes = 0;
};

// Flattens a prepared schedule (prepare_schedule validated it) against the blob's offsets: every stream, or
// the n_streams from first_stream (one tensor-parallel rank's, on its own GPU).
// Throws mk::Error for a tile that is not a legal bulk copy or a page plan over PageRing::kMaxPages.
UploadLayout build_upload_layout(const Schedule& schedule, const PreparedSchedule& prepared, const WeightBlob& blob,
                                 uint32_t first_stream = 0, uint32_t n_streams = UINT32_MAX);

// The most tokens a chunk of this prefill schedule's shape may hold on the CUDA backends: the prefill ops keep one
// fp32 per token in the team scratch (op_scratch_bytes, past 64 reduction floats): F floats, max(d_model + 1024,
// 3840) - 64, less kMmaStageFloats + 4 where a weight is in a block format (a pass stages its quants in the
// scratch's last floats, past the tokens' vectors); with a bf16 KV cache, rms_qkv_rows finishes each K/V block's
// (T, rows) outputs there too (rounded once when stored), so F / (rows + 1) for its largest block (the blocks' rows
// do not depend on T).
uint32_t device_prefill_limit(const Schedule& prefill);

}  // namespace mk

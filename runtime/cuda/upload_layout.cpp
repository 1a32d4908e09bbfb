// The upload layout (see upload_layout.hpp).
#include "runtime/cuda/upload_layout.hpp"

#include <algorithm>
#include <cstring>

#include "instructions/common/token_rows.hpp"
#include "instructions/rms_qkv_rows/rms_qkv_rows.hpp"
#include "models/error.hpp"
#include "runtime/cuda/page_ring.hpp"

namespace mk {

WeightBlob build_weight_blob(const std::vector<WeightRef>& refs) {
    WeightBlob blob;
    blob.offsets.assign(refs.size(), WeightBlob::kAbsent);
    blob.weights.assign(refs.size(), DeviceWeight{});
    uint64_t size = 0;
    for (size_t id = 0; id < refs.size(); ++id) {
        const WeightRef& w = refs[id];
        if (w.data == nullptr) continue;
        if (w.rows > 1 && w.row_bytes % kDeviceRowAlign)
            fail("weight {}: rows of {} bytes are not {}-byte aligned; the CUDA backend needs a schedule compiled "
                 "with padded rows", id, w.row_bytes, kDeviceRowAlign);
        if (w.row_bytes > UINT32_MAX) fail("weight {}: a row of {} bytes is too long", id, w.row_bytes);
        size = align_up(size, kBufferAlignBytes);
        blob.offsets[id] = size;
        blob.weights[id] = {nullptr, uint32_t(w.dtype), w.rows, w.cols, uint32_t(w.row_bytes)};
        size += uint64_t(w.rows) * w.row_bytes;
    }
    try {
        blob.bytes.assign(size, 0);
    } catch (const std::bad_alloc&) {
        fail("cannot allocate {} bytes of host memory to repack the weights", size);
    }
    for (size_t id = 0; id < refs.size(); ++id)
        if (refs[id].data) std::memcpy(blob.bytes.data() + blob.offsets[id], refs[id].data, uint64_t(refs[id].rows) * refs[id].row_bytes);
    return blob;
}

std::vector<DeviceWeight> device_weights(const WeightBlob& blob, const uint8_t* base) {
    std::vector<DeviceWeight> out = blob.weights;
    for (size_t id = 0; id < out.size(); ++id)
        if (blob.offsets[id] != WeightBlob::kAbsent) out[id].data = base + blob.offsets[id];
    return out;
}

DeviceTile device_tile(const Tile& t, const WeightBlob& blob, const std::string& what) {
    const DeviceWeight& w = blob.weights.at(t.weight);
    const uint64_t src = blob.offsets.at(t.weight) + uint64_t(t.row_begin) * w.row_bytes + t.col_byte();
    if (blob.offsets[t.weight] == WeightBlob::kAbsent || src % kDeviceRowAlign || t.bytes % kDeviceRowAlign ||
        t.piece_bytes() % kDeviceRowAlign || (!t.whole_rows() && w.row_bytes % kDeviceRowAlign) || t.bytes > UINT32_MAX ||
        t.n_cols > UINT16_MAX || t.pass_tiles > UINT16_MAX)
        fail("{}: tile of weight {} rows [{}, {}) ({} bytes at offset {}) is not a 16-byte bulk copy or too wide", what, t.weight,
             t.row_begin, t.row_begin + t.n_rows, t.bytes, src);
    return {src, uint32_t(t.bytes), t.weight, t.row_begin, t.n_rows, t.col_begin, uint16_t(t.n_cols), uint16_t(t.pass_tiles)};
}

UploadLayout build_upload_layout(const Schedule& s, const PreparedSchedule& prepared, const WeightBlob& blob,
                                 uint32_t first_stream, uint32_t n_streams) {
    UploadLayout out;
    out.stream_begin.push_back(0);
    const uint32_t end = uint32_t(std::min<uint64_t>(prepared.streams.size(), uint64_t(first_stream) + n_streams));
    for (uint32_t sm = first_stream; sm < end; ++sm) {
        for (const PreparedInstruction& p : prepared.streams[sm]) {
            const PagePlan& plan = *p.plan;
            if (plan.n_pages > PageRing::kMaxPages)
                fail("{}: the page plan holds {} pages, the CUDA kernel at most {}", p.op->describe(*p.ins),
                     plan.n_pages, PageRing::kMaxPages);
            out.instructions.push_back(*p.ins);
            out.tile_begin.push_back(uint32_t(out.tiles.size()));
            out.release_begin.push_back(uint32_t(out.release_order.size()));
            for (const Tile& t : plan.tiles) {
                out.tiles.push_back(device_tile(t, blob, p.op->describe(*p.ins)));
                out.max_tile_bytes = std::max(out.max_tile_bytes, t.bytes);
            }
            for (uint32_t slot : plan.release_order) out.release_order.push_back(uint8_t(slot));
            out.max_pages = std::max(out.max_pages, plan.n_pages);
        }
        out.stream_begin.push_back(uint32_t(out.instructions.size()));
    }
    out.tile_begin.push_back(uint32_t(out.tiles.size()));
    out.release_begin.push_back(uint32_t(out.release_order.size()));
    if (out.max_tile_bytes > s.target.page_bytes)
        fail("a tile of {} bytes does not fit the target's {}-byte pages", out.max_tile_bytes, s.target.page_bytes);
    return out;
}

uint32_t device_prefill_limit(const Schedule& prefill) {
    // A block format's MMA passes stage their quants in the scratch's last kMmaStageFloats, rounded down to a 16-byte
    // boundary (up to 4 floats more), past the tokens' vectors.
    bool stages = false;
    for (const WeightFormat& w : prefill.weights) stages = stages || mma_block_format(w.dtype);
    const uint64_t floats = op_scratch_bytes(prefill.dims) / 4 - 64 - (stages ? kMmaStageFloats + 4 : 0);
    uint64_t limit = floats;
    if (prefill.dims.kv_type == uint32_t(KvType::bf16))
        for (const auto& stream : prefill.streams)
            for (const Instruction& ins : stream) {
                if (ins.opcode != uint16_t(Opcode::rms_qkv_rows)) continue;
                const auto a = decode_args<RmsQkvRowsArgs>(ins);
                if (QkvKind(a.kind) != QkvKind::q) limit = std::min<uint64_t>(limit, floats / (a.n_rows + 1));
            }
    return uint32_t(limit);
}

}  // namespace mk

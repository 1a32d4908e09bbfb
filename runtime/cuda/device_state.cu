// Uploading a bound schedule to the device (see device_state.hpp).
#include "runtime/cuda/device_state.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "instructions/sample/sampling.hpp"
#include "models/error.hpp"
#include "models/quant.hpp"
#include "runtime/model_weights.hpp"

namespace mk {

void check_cuda(int status, const char* what) {
    if (status != cudaSuccess) {
        cudaGetLastError();  // clear a non-sticky error so the next call is not blamed for it
        fail("CUDA: {}: {}", what, cudaGetErrorString(cudaError_t(status)));
    }
}

DeviceBuffer::DeviceBuffer(uint64_t bytes, const char* what) : bytes_(bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMalloc(&data_, bytes), what);
    check_cuda(cudaMemset(data_, 0, bytes), what);
}
DeviceBuffer::~DeviceBuffer() {
    if (data_) cudaFree(data_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_) cudaFree(data_);
        data_ = other.data_;
        bytes_ = other.bytes_;
        other.data_ = nullptr;
    }
    return *this;
}
void DeviceBuffer::upload(const void* host, uint64_t bytes, const char* what) {
    if (bytes > bytes_) fail("CUDA: {}: {} bytes do not fit a {}-byte buffer", what, bytes, bytes_);
    if (bytes) check_cuda(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), what);
}

DeviceInfo current_device() {
    DeviceInfo info;
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        cudaGetLastError();
        fail("--backend cuda: no usable CUDA device ({}); use --backend cpu",
             status != cudaSuccess ? cudaGetErrorString(status) : "none found");
    }
    check_cuda(cudaGetDevice(&info.ordinal), "cudaGetDevice");
    cudaDeviceProp props{};
    check_cuda(cudaGetDeviceProperties(&props, info.ordinal), "cudaGetDeviceProperties");
    info.name = props.name;
    info.sm_count = uint32_t(props.multiProcessorCount);
    info.major = uint32_t(props.major);
    info.minor = uint32_t(props.minor);
    info.smem_optin = props.sharedMemPerBlockOptin;
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    info.free_bytes = free_bytes;
    info.total_bytes = total_bytes;
    return info;
}

void DeviceState::check_step(int32_t token, int32_t pos, uint32_t next_pos) const {
    if (pos < 0 || uint32_t(pos) >= ctx_len) fail("position {} is outside the context of {} tokens", pos, ctx_len);
    if (uint32_t(pos) != next_pos) fail("position {} does not follow the previous step (expected {})", pos, next_pos);
    if (token < 0 || uint32_t(token) >= schedule.dims.vocab)
        fail("token id {} is outside the vocabulary ({})", token, schedule.dims.vocab);
}

std::span<const float> DeviceState::host_logits() const {
    if (!logits_valid) {
        logits.resize(schedule.dims.vocab);
        check_cuda(cudaMemcpy(logits.data(), arena.as<uint8_t>() + schedule.logits_off, 4ull * logits.size(),
                              cudaMemcpyDeviceToHost),
                   "reading the logits");
        logits_valid = true;
    }
    return {logits.data(), logits.size()};
}

int32_t DeviceState::sampled_token(int32_t device_token, const SamplingParams& params, std::span<const int32_t> history,
                                   int32_t pos) const {
    if (params.temperature <= 0.0f && params.repeat_penalty == 1.0f) return device_token;  // greedy: the device's
    const std::span<const float> z = host_logits();
    return sample_token(z.data(), uint32_t(z.size()), params, history.data(), int32_t(history.size()), pos);
}

namespace {

bool device_supports(DType dtype) {
    switch (dtype) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
        return true;
    default:
        return false;
    }
}

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& v, const char* what) {
    DeviceBuffer buffer(std::max<uint64_t>(1, v.size() * sizeof(T)), what);
    buffer.upload(v.data(), v.size() * sizeof(T), what);
    return buffer;
}

}  // namespace

std::unique_ptr<DeviceState> upload_program_state(const Model& model, Schedule schedule, uint32_t ctx_len) {
    const std::string source = model.path.string();
    auto state = std::make_unique<DeviceState>();
    DeviceState& s = *state;
    s.schedule = std::move(schedule);
    const ModelDims& d = s.schedule.dims;
    s.ctx_len = ctx_len ? ctx_len : uint32_t(std::min<int64_t>(model.config.context_length, 4096));
    if (int64_t(s.ctx_len) > model.config.context_length)
        fail("{}: context {} exceeds the model's {}", source, s.ctx_len, model.config.context_length);

    ModelWeights bound = bind_weights(model, s.schedule);
    for (size_t id = 0; id < bound.refs.size(); ++id) {
        const WeightRef& w = bound.refs[id];
        if (w.data && !device_supports(w.dtype))
            fail("{}: weight {} is {}, which the CUDA backend does not run yet (F32, F16, BF16, Q8_0, Q4_0, Q4_1)",
                 source, id, dtype_name(w.dtype));
    }
    // prepare_schedule validates against a program's memory; the device buffers do not exist yet, and it
    // only checks that they are present, so stand-ins mark them.
    uint8_t stand_in[16] = {};
    ProgramMemory memory;
    memory.arena = stand_in;
    memory.weights = bound.refs.data();
    memory.k_cache = memory.v_cache = reinterpret_cast<float*>(stand_in);
    memory.ctx_len = s.ctx_len;
    memory.rope_inv_freq = bound.rope_inv_freq.data();
    s.prepared = prepare_schedule(s.schedule, memory, /*check_pages=*/true, /*keep_accesses=*/false);

    uint32_t samples = 0;
    for (const auto& stream : s.schedule.streams)
        for (const Instruction& ins : stream) samples += Opcode(ins.opcode) == Opcode::sample;
    if (samples != s.schedule.tp_size)
        fail("schedule: {} sample instructions a step; the CUDA backend needs exactly one per rank ({})", samples,
             s.schedule.tp_size);

    WeightBlob blob = build_weight_blob(bound.refs);
    s.layout = build_upload_layout(s.schedule, s.prepared, blob);
    s.weight_bytes = blob.bytes.size();

    const uint64_t cache_bytes = 4ull * d.n_layers * d.kv_dim() * s.ctx_len;
    const uint64_t needed = blob.bytes.size() + 2 * cache_bytes + s.schedule.arena_bytes +
                            s.layout.instructions.size() * sizeof(Instruction) + s.layout.tiles.size() * sizeof(DeviceTile);
    const DeviceInfo device = current_device();
    if (needed > device.free_bytes)
        fail("{}: context {} needs {} bytes of device memory ({} of weights, {} of KV cache), but {} has {} free; use a "
             "smaller context (-c)", source, s.ctx_len, needed, blob.bytes.size(), 2 * cache_bytes, device.name,
             device.free_bytes);

    s.blob = upload_vector(blob.bytes, "weights");
    std::vector<DeviceWeight> table = device_weights(blob, s.blob.as<uint8_t>());
    blob = WeightBlob{};  // the host copy is no longer needed
    s.weights = upload_vector(table, "weight table");
    s.arena = DeviceBuffer(s.schedule.arena_bytes + 16, "activation arena");
    s.k_cache = DeviceBuffer(cache_bytes, "K cache");
    s.v_cache = DeviceBuffer(cache_bytes, "V cache");
    s.rope = upload_vector(bound.rope_inv_freq, "RoPE table");
    s.instructions = upload_vector(s.layout.instructions, "instructions");
    s.stream_begin = upload_vector(s.layout.stream_begin, "stream table");
    s.tile_begin = upload_vector(s.layout.tile_begin, "tile index");
    s.tiles = upload_vector(s.layout.tiles, "tiles");
    s.release_begin = upload_vector(s.layout.release_begin, "release index");
    s.release_order = upload_vector(s.layout.release_order, "release order");
    s.counters = DeviceBuffer(std::max<uint64_t>(8, 8ull * s.schedule.counters.size()), "counters");
    std::vector<uint32_t> totals;
    for (const CounterInfo& c : s.schedule.counters) totals.push_back(c.step_total);
    s.step_totals = upload_vector(totals, "counter totals");

    s.ctx.dims = d;
    s.ctx.rope_inv_freq = s.rope.as<float>();
    s.ctx.arena = s.arena.as<uint8_t>();
    s.ctx.weights = s.weights.as<DeviceWeight>();
    s.ctx.k_cache = s.k_cache.as<float>();
    s.ctx.v_cache = s.v_cache.as<float>();
    s.ctx.ctx_len = s.ctx_len;
    return state;
}

}  // namespace mk

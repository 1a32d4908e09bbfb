// Uploading a bound schedule to the device (see device_state.hpp).
#include "runtime/cuda/device_state.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "instructions/sample/sampling.hpp"
#include "models/error.hpp"
#include "models/quant.hpp"
#include "runtime/cuda/interpreter.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/program.hpp"

namespace mk {
MK_CUDA_BACKEND_BEGIN

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

void DeviceState::post_chunk(std::span<const int32_t> tokens, int32_t pos, uint32_t next_pos) const {
    const uint32_t limit = schedule.prefill_tokens;
    if (tokens.empty() || tokens.size() > limit) fail("prefill of {} tokens: a chunk holds 1 to {}", tokens.size(), limit);
    if (pos < 0 || uint64_t(pos) + tokens.size() > ctx_len)
        fail("positions {}..{} are outside the context of {} tokens", pos, pos + int64_t(tokens.size()) - 1, ctx_len);
    if (uint32_t(pos) != next_pos) fail("position {} does not follow the previous step (expected {})", pos, next_pos);
    for (int32_t id : tokens)
        if (id < 0 || uint32_t(id) >= schedule.dims.vocab)
            fail("token id {} is outside the vocabulary ({})", id, schedule.dims.vocab);
    // Every rank embeds the chunk: rank k's tokens sit in its region (its entry's base is biased by the region). One
    // rank of several GPUs writes its own; its peers' programs write theirs.
    for (uint32_t k = first_rank(); k < first_rank() + n_ranks_here(); ++k)
        check_cuda(cudaMemcpy(rank_memory.at(k).arena + schedule.tokens_off + uint64_t(k) * schedule.rank_arena_bytes,
                              tokens.data(), 4 * tokens.size(), cudaMemcpyHostToDevice),
                   "writing the chunk's tokens");
}

std::span<const float> DeviceState::chunk_logits(uint32_t n, bool every) const {
    if (!schedule.all_logits) return host_logits(1);
    const std::span<const float> rows = host_logits(n);
    return every ? rows : rows.subspan(uint64_t(n - 1) * schedule.dims.vocab, schedule.dims.vocab);
}

std::span<const float> DeviceState::host_logits(uint32_t rows) const {
    if (logits_rows != rows) {
        logits.resize(uint64_t(rows) * schedule.dims.vocab);
        check_cuda(cudaMemcpy(logits.data(), ctx.arena + schedule.logits_off, 4ull * logits.size(),
                              cudaMemcpyDeviceToHost),
                   "reading the logits");
        logits_rows = rows;
    }
    return {logits.data(), logits.size()};
}

int32_t DeviceState::sampled_token(int32_t device_token, const SamplingParams& params, std::span<const int32_t> history,
                                   int32_t pos) const {
    if (params.temperature <= 0.0f && params.repeat_penalty == 1.0f) return device_token;  // greedy: the device's
    const std::span<const float> z = host_logits();
    return sample_token(z.data(), uint32_t(z.size()), params, history.data(), int32_t(history.size()), pos);
}

bool device_supports(DType dtype) {
    switch (dtype) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
        return true;
    default:
        return false;
    }
}

namespace {

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& v, const char* what) {
    DeviceBuffer buffer(std::max<uint64_t>(1, v.size() * sizeof(T)), what);
    buffer.upload(v.data(), v.size() * sizeof(T), what);
    return buffer;
}

}  // namespace

uint64_t exchange_arena_bytes(const Schedule& schedule) {
    return (schedule.tp_size > 1 ? schedule.rank_arena_bytes : schedule.arena_bytes) + 16;
}
uint64_t exchange_counter_bytes(const Schedule& schedule) {
    return 8 * std::max<uint64_t>(1, schedule.counters.size());
}

void DeviceState::set_peer(uint32_t rank, uint8_t* arena_region, uint64_t* counters) {
    if (rank >= rank_memory.size() || rank == placement.rank || placement.layout != RankLayout::one_rank)
        fail("CUDA: set_peer({}) on a device state of rank {}", rank, placement.rank);
    const RankMemory& own = rank_memory[placement.rank];
    rank_memory[rank] = {rank_biased(arena_region, rank * schedule.rank_arena_bytes), own.k_cache, own.v_cache, counters};
    rank_table.upload(rank_memory.data(), rank_memory.size() * sizeof(RankMemory), "rank table");
}

uint32_t DeviceState::first_rank() const { return placement.layout == RankLayout::one_rank ? placement.rank : 0; }
uint32_t DeviceState::n_ranks_here() const { return placement.layout == RankLayout::one_rank ? 1 : schedule.tp_size; }

void DeviceState::reset_counters() const {
    const uint32_t count = placement.layout == RankLayout::separate ? schedule.tp_size : 1;  // shared: one array
    for (uint32_t r = first_rank(); r < first_rank() + count; ++r)
        check_cuda(cudaMemset(rank_memory[r].counters, 0, exchange_counter_bytes(schedule)), "resetting the counters");
}

uint32_t DeviceState::posted_token_off() const {
    return uint32_t(schedule.token_off + first_rank() * schedule.rank_arena_bytes);
}

namespace {

// Binds the state's schedule to the model (only the weights `used` names, where given), refuses weight formats
// the device code lacks, prepares it against stand-in memory and checks what the kernels assume of a step.
ModelWeights bind_and_prepare(const Model& model, DeviceState& s, const std::vector<bool>* used) {
    const std::string source = model.path.string();
    ModelWeights bound = bind_weights(model, s.schedule, used);
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
    memory.k_cache = memory.v_cache = stand_in;
    memory.ctx_len = s.ctx_len;
    memory.rope_inv_freq = bound.rope_inv_freq.data();
    s.prepared = prepare_schedule(s.schedule, memory, /*check_pages=*/true, /*keep_accesses=*/false);

    uint32_t samples = 0;
    for (const auto& stream : s.schedule.streams)
        for (const Instruction& ins : stream) samples += op_info(ins.opcode).effects(ins).posts_token();
    const uint32_t prefill = s.schedule.prefill_tokens, tp = s.schedule.tp_size;
    if (samples != (prefill ? 0 : tp))  // a prefill step samples on the host, from its logits
        fail("schedule: {} sample instructions a step; the CUDA backend needs exactly one per rank ({}), none in a "
             "prefill step", samples, tp);
    if (prefill && prefill > device_prefill_limit(s.schedule))
        fail("schedule: prefill chunks of {} tokens (-b/--batch); the CUDA backends take at most {} for this model{}",
             prefill, device_prefill_limit(s.schedule),
             s.schedule.dims.kv_type == uint32_t(KvType::bf16) ? " and a bf16 KV cache" : "");
    return bound;
}

// The schedule's flat arrays and each instruction's wait and signal slots.
void upload_schedule_tables(DeviceState& s) {
    s.instructions = upload_vector(s.layout.instructions, "instructions");
    s.stream_begin = upload_vector(s.layout.stream_begin, "stream table");
    s.tile_begin = upload_vector(s.layout.tile_begin, "tile index");
    s.tiles = upload_vector(s.layout.tiles, "tiles");
    s.release_begin = upload_vector(s.layout.release_begin, "release index");
    // A counter a transfer signals is acquired and released at system scope by everyone (peers write it).
    std::vector<uint8_t> remote(exchange_counter_bytes(s.schedule) / 8, 0);
    for (const auto& stream : s.schedule.streams)
        for (const Instruction& ins : stream)
            if (op_info(ins.opcode).effects(ins).writes_peer())
                for (uint32_t g = 0; g < ins.n_signals; ++g) remote[ins.signals[g].counter] = 1;
    std::vector<SyncSlots> sync(s.layout.instructions.size(), SyncSlots{});
    for (size_t i = 0; i < sync.size(); ++i) {
        const Instruction& ins = s.layout.instructions[i];
        for (uint32_t w = 0; w < ins.n_waits; ++w) {
            const Wait& wait = ins.waits[w];
            sync[i].waits[w] = {wait.counter, kSlotValid | (remote[wait.counter] ? kSlotSystem : 0u),
                                s.schedule.counters[wait.counter].step_total, wait.target};
        }
        for (uint32_t g = 0; g < ins.n_signals; ++g) {
            const Signal& signal = ins.signals[g];
            sync[i].signals[g] = {signal.counter,
                                  signal.delta | (kSlotValid | (remote[signal.counter] ? kSlotSystem : 0u)) << 16};
        }
        pack_release_order(s.layout.release_order.data() + s.layout.release_begin[i],
                           s.layout.release_begin[i + 1] - s.layout.release_begin[i], sync[i].release);
    }
    s.sync_slots = upload_vector(sync, "wait and signal slots");
}

}  // namespace

std::unique_ptr<DeviceState> upload_program_state(const Model& model, Schedule schedule, uint32_t ctx_len,
                                                  const RankPlacement& placement) {
    const std::string source = model.path.string();
    auto state = std::make_unique<DeviceState>();
    DeviceState& s = *state;
    s.schedule = std::move(schedule);
    s.placement = placement;
    const ModelDims& d = s.schedule.dims;
    const uint32_t tp = s.schedule.tp_size;
    const bool one_rank = placement.layout == RankLayout::one_rank;
    if (one_rank && placement.rank >= tp) fail("CUDA: rank {} of a {}-rank schedule", placement.rank, tp);
    s.ctx_len = default_ctx_len(ctx_len, model.config);
    if (int64_t(s.ctx_len) > model.config.context_length)
        fail("{}: context {} exceeds the model's {}", source, s.ctx_len, model.config.context_length);

    // One rank on its own GPU reads only the weights its streams name (the verifier's rank check keeps each
    // rank to its own layers' and slices' weights); the others are bound to placeholders, never copied.
    const uint32_t n_sms = s.schedule.target.n_sms;
    const uint32_t first_stream = one_rank ? placement.rank * n_sms : 0;
    const uint32_t n_streams = one_rank ? n_sms : uint32_t(s.schedule.streams.size());
    const std::vector<bool> used = one_rank ? weights_read_by(s.schedule, first_stream, n_streams) : std::vector<bool>{};
    ModelWeights bound = bind_and_prepare(model, s, one_rank ? &used : nullptr);

    if (one_rank) {
        for (uint32_t sm = first_stream; sm < first_stream + n_streams; ++sm)
            for (const PreparedInstruction& p : s.prepared.streams[sm])
                for (const Tile& t : p.plan->tiles)
                    if (!used.at(t.weight))
                        fail("CUDA: {} streams a tile of weight {} it does not name", p.op->describe(*p.ins), t.weight);
        for (size_t id = 0; id < bound.refs.size(); ++id)
            if (!used[id]) bound.refs[id] = WeightRef{};  // the placeholders stay off the device
    }
    WeightBlob blob = build_weight_blob(bound.refs);
    s.layout = build_upload_layout(s.schedule, s.prepared, blob, first_stream, n_streams);
    s.weight_bytes = blob.bytes.size();

    // Activations, caches and counters: one set, or one per rank, each base biased by its region's start.
    const uint32_t n_sets = placement.layout == RankLayout::separate ? tp : 1;
    const uint32_t set_ranks = placement.layout == RankLayout::shared ? 1 : tp;  // ranks whose memory splits
    const uint64_t cache_bytes = uint64_t(d.kv_bytes()) * d.n_layers * d.kv_dim() * s.ctx_len / set_ranks;
    const uint64_t arena_bytes = s.schedule.arena_bytes / set_ranks;
    const uint64_t counter_bytes = exchange_counter_bytes(s.schedule);
    const uint64_t needed = blob.bytes.size() + n_sets * (2 * cache_bytes + arena_bytes + counter_bytes) +
                            s.layout.instructions.size() * sizeof(Instruction) + s.layout.tiles.size() * sizeof(DeviceTile);
    const DeviceInfo device = current_device();
    if (needed > device.free_bytes)
        fail("{}: context {} needs {} bytes of device memory ({} of weights, {} of KV cache), but {} has {} free; use a "
             "smaller context (-c)", source, s.ctx_len, needed, blob.bytes.size(), 2 * n_sets * cache_bytes,
             device.name, device.free_bytes);

    s.blob = upload_vector(blob.bytes, "weights");
    const std::vector<DeviceWeight> weight_table = device_weights(blob, s.blob.as<uint8_t>());
    blob.bytes = std::vector<uint8_t>();  // the host copy is no longer needed
    s.weights = upload_vector(weight_table, "weight table");
    s.blob_index = std::move(blob);
    for (uint32_t k = 0; k < n_sets; ++k) {
        const uint32_t r = one_rank ? placement.rank : k;  // shared: rank 0's bias is none
        RankBuffers& b = s.ranks.emplace_back();
        uint8_t* arena = placement.exchange_arena;
        uint64_t* counters = placement.exchange_counters;
        if (!one_rank || !arena) {
            b.arena = DeviceBuffer(arena_bytes + 16, "activation arena");
            arena = b.arena.as<uint8_t>();
        }
        if (!one_rank || !counters) {
            b.counters = DeviceBuffer(counter_bytes, "counters");
            counters = b.counters.as<uint64_t>();
        }
        b.k_cache = DeviceBuffer(cache_bytes, "K cache");
        b.v_cache = DeviceBuffer(cache_bytes, "V cache");
        s.rank_memory.push_back({rank_biased(arena, r * arena_bytes), rank_biased(b.k_cache.as<uint8_t>(), r * cache_bytes),
                                 rank_biased(b.v_cache.as<uint8_t>(), r * cache_bytes), counters});
    }
    // Shared: every rank's bases are the same. One rank: its peers' entries come from set_peer.
    while (s.rank_memory.size() < tp) s.rank_memory.push_back(s.rank_memory[0]);
    s.rank_table = upload_vector(s.rank_memory, "rank table");
    s.rope = upload_vector(bound.rope_inv_freq, "RoPE table");
    upload_schedule_tables(s);

    const RankMemory& first = s.rank_memory[one_rank ? placement.rank : 0];
    s.ctx.dims = d;
    s.ctx.rope_inv_freq = s.rope.as<float>();
    s.ctx.arena = first.arena;
    s.ctx.ranks = s.rank_table.as<RankMemory>();
    s.ctx.weights = s.weights.as<DeviceWeight>();
    s.ctx.k_cache = first.k_cache;
    s.ctx.v_cache = first.v_cache;
    s.ctx.ctx_len = s.ctx_len;
    return state;
}

std::unique_ptr<DeviceState> upload_prefill_state(const Model& model, Schedule prefill, const DeviceState& decode,
                                                  uint8_t* exchange_arena, uint64_t* exchange_counters) {
    const Schedule& own = decode.schedule;
    if (prefill.prefill_tokens == 0) fail("the prefill schedule is a decode step (compile it with --prefill T)");
    if (prefill.tp_size != own.tp_size)
        fail("CUDA: the prefill schedule is for {} tensor-parallel rank(s), the decode step for {}", prefill.tp_size,
             own.tp_size);
    if (prefill.config_hash != own.config_hash || prefill.weights.size() != own.weights.size() ||
        prefill.dims.kv_type != own.dims.kv_type)
        fail("CUDA: the prefill schedule was compiled for another model or KV cache type");
    for (size_t id = 0; id < own.weights.size(); ++id)
        if (prefill.weights[id].dtype != own.weights[id].dtype || prefill.weights[id].row_bytes != own.weights[id].row_bytes)
            fail("CUDA: the prefill schedule expects weight {} in another format", id);
    if (prefill.target.n_sms != own.target.n_sms || prefill.target.n_pages != own.target.n_pages ||
        prefill.target.page_bytes != own.target.page_bytes)
        fail("CUDA: the prefill schedule was compiled for another target ({} SMs of {} pages; the decode step's: {} of {})",
             prefill.target.n_sms, prefill.target.n_pages, own.target.n_sms, own.target.n_pages);

    auto state = std::make_unique<DeviceState>();
    DeviceState& s = *state;
    s.schedule = std::move(prefill);
    s.ctx_len = decode.ctx_len;
    s.weights_of = &decode;
    s.placement = {decode.placement.layout, decode.placement.rank, exchange_arena, exchange_counters};
    const bool one_rank = s.placement.layout == RankLayout::one_rank;
    // One rank of several GPUs: its own streams, over the weights its decode step uploaded (the same layers and
    // slices: the rank check keeps both steps' ranks to them).
    const uint32_t n_sms = s.schedule.target.n_sms;
    const uint32_t first_stream = one_rank ? s.placement.rank * n_sms : 0;
    const uint32_t n_streams = one_rank ? n_sms : uint32_t(s.schedule.streams.size());
    const std::vector<bool> used = one_rank ? weights_read_by(s.schedule, first_stream, n_streams) : std::vector<bool>{};
    const ModelWeights bound = bind_and_prepare(model, s, one_rank ? &used : nullptr);
    if (one_rank)
        for (size_t id = 0; id < used.size(); ++id)
            if (used[id] && bound.refs[id].data && decode.blob_index.offsets[id] == WeightBlob::kAbsent)
                fail("CUDA: rank {}'s prefill step reads weight {}, which its decode step did not upload", s.placement.rank,
                     id);
    // The tiles' offsets into the decode step's blob: the same weights, bound the same way, one upload.
    s.layout = build_upload_layout(s.schedule, s.prepared, decode.blob_index, first_stream, n_streams);

    // As the decode step's memory (upload_program_state): one arena and counter array holding every rank
    // (shared), one per rank (separate, --tp-loopback), or the rank's own (one_rank, in the exchange memory given),
    // each rank's entry biased by its region; the rank's KV caches are the decode step's.
    const uint32_t tp = s.schedule.tp_size;
    const uint32_t n_sets = s.placement.layout == RankLayout::separate ? tp : 1;
    const uint32_t set_ranks = s.placement.layout == RankLayout::shared ? 1 : tp;  // ranks whose memory splits
    const uint64_t arena_bytes = s.schedule.arena_bytes / set_ranks, counter_bytes = exchange_counter_bytes(s.schedule);
    const uint64_t needed = n_sets * (arena_bytes + counter_bytes) + s.layout.instructions.size() * sizeof(Instruction) +
                            s.layout.tiles.size() * sizeof(DeviceTile);
    const DeviceInfo device = current_device();
    if (needed > device.free_bytes)
        fail("{}: prefill chunks of {} tokens need {} more bytes of device memory, but {} has {} free; use a smaller "
             "-b", model.path.string(), s.schedule.prefill_tokens, needed, device.name, device.free_bytes);
    for (uint32_t k = 0; k < n_sets; ++k) {
        const uint32_t r = one_rank ? s.placement.rank : k;
        RankBuffers& b = s.ranks.emplace_back();
        uint8_t* arena = one_rank ? exchange_arena : nullptr;
        uint64_t* counters = one_rank ? exchange_counters : nullptr;
        if (!arena) {
            b.arena = DeviceBuffer(arena_bytes + 16, "prefill activation arena");
            arena = b.arena.as<uint8_t>();
        }
        if (!counters) {
            b.counters = DeviceBuffer(counter_bytes, "prefill counters");
            counters = b.counters.as<uint64_t>();
        }
        const RankMemory& caches = decode.rank_memory.at(r);
        s.rank_memory.push_back({rank_biased(arena, r * arena_bytes), caches.k_cache, caches.v_cache, counters});
    }
    // Shared: every rank's bases are the same. One rank: its peers' entries come from set_peer.
    while (s.rank_memory.size() < tp) s.rank_memory.push_back(s.rank_memory[0]);
    s.rank_table = upload_vector(s.rank_memory, "prefill rank table");
    upload_schedule_tables(s);

    s.ctx = decode.ctx;  // dims, weights, RoPE table, caches, context
    s.ctx.arena = s.rank_memory[s.first_rank()].arena;
    s.ctx.ranks = s.rank_table.as<RankMemory>();
    return state;
}

MK_CUDA_BACKEND_END
}  // namespace mk

// Each op's CUDA code against its CPU code, instruction by instruction (tag [cuda][ops]): the same
// random activations and KV cache on both sides, the instruction's output regions poisoned with NaN
// first, then every region it writes compared (relative error by weight type). Decode schedules, and prefill
// schedules (chunks of 7 tokens, 5 of them run: a short last chunk) for the prefill ops.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include <cuda_runtime_api.h>

#include "instructions/registry.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/backend.hpp"
#include "runtime/cpu/tile_readers.hpp"
#include "runtime/cuda/device_state.hpp"
#include "runtime/cuda/op_kernels.hpp"
#include "scheduler/assign.hpp"
#include "scheduler/compile.hpp"
#include "tests/cuda/cuda_test_config.hpp"

namespace mk {
namespace {

struct HostMemory {
    std::vector<uint8_t> arena;
    std::vector<float> k_cache, v_cache;
};

// The KV-cache elements of a written access: its slots at its positions that the step runs (pos + k, k < n_run).
template <class Visit>
void for_each_cache_element(const Access& a, const ModelDims& d, uint32_t ctx_len, int32_t pos, uint32_t n_run,
                            Visit&& visit) {
    for (uint32_t k = a.pos_offset; k < std::min(a.pos_offset + a.n_pos, n_run); ++k)
        for (uint64_t slot = a.begin; slot < a.end; ++slot) {
            const uint64_t layer = slot / d.kv_dim(), within = slot % d.kv_dim();
            const uint64_t head = within / d.head_dim, dim = within % d.head_dim;
            visit(((layer * d.n_kv_heads + head) * ctx_len + uint64_t(pos) + k) * d.head_dim + dim);
        }
}

// The bytes of one written region: arena bytes, or the KV-cache elements the step writes.
std::vector<float> region(const HostMemory& m, const Access& a, const ModelDims& d, uint32_t ctx_len, int32_t pos,
                          uint32_t n_run) {
    std::vector<float> out;
    if (a.space == Space::arena) {
        out.resize((a.end - a.begin) / 4);
        std::memcpy(out.data(), m.arena.data() + a.begin, out.size() * 4);
        return out;
    }
    const std::vector<float>& cache = a.space == Space::k_cache ? m.k_cache : m.v_cache;
    for_each_cache_element(a, d, ctx_len, pos, n_run, [&](uint64_t i) { out.push_back(cache[i]); });
    return out;
}

void poison(HostMemory& m, const Access& a, const ModelDims& d, uint32_t ctx_len, int32_t pos, uint32_t n_run) {
    const float nan = std::nanf("");
    if (a.space == Space::arena) {
        for (uint64_t b = a.begin; b + 4 <= a.end; b += 4) std::memcpy(m.arena.data() + b, &nan, 4);
        return;
    }
    std::vector<float>& cache = a.space == Space::k_cache ? m.k_cache : m.v_cache;
    for_each_cache_element(a, d, ctx_len, pos, n_run, [&](uint64_t i) { cache[i] = nan; });
}

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
    double scale = 0, worst = 0;
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;  // an output left unwritten, or NaN made up
        if (!std::isnan(want[i])) worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::max(scale, 1e-30));
    }
    return worst;
}

}  // namespace

TEST_CASE("CUDA ops: every op matches its CPU code on random inputs", "[cuda][ops]") {
    struct Case {
        const char* spec;
        double tol;
        uint32_t tp = 1;  // > 1: the --tp-loopback schedule, for transfer and reduce_add
        bool prefill = false;  // the prefill schedule for chunks of `chunk` tokens, all but 2 of them run
        uint32_t chunk = 7;    // 8 or more: the BF16, F16, Q8_0, Q4_0, Q4_1 matrices in MMA tiles (tensor cores)
    };
    std::set<uint16_t> covered;
    // The TP case's vocabulary splits 333/333/334, so its logits transfers take the 4-byte path.
    for (const Case& c : {Case{"synthetic:tiny-llama:f32:seed=31", 1e-5}, Case{"synthetic:tiny-qwen2:f32:seed=32", 1e-5},
                          Case{"synthetic:tiny-qwen3:f32:seed=33", 1e-5},
                          Case{"synthetic:smollm2-135m:bf16:layers=2:seed=34", 1e-2},
                          Case{"synthetic:smollm2-135m:q8_0:layers=2:seed=35", 1e-2},
                          Case{"synthetic:smollm2-135m:q4_1:layers=2:seed=36", 1e-2},
                          Case{"synthetic:tiny-llama:f32:layers=2:d_model=192:heads=12:kv_heads=6:head_dim=16:ff=384:"
                               "vocab=1000:seed=37", 1e-5, 3},
                          Case{"synthetic:tiny-llama:f32:seed=41", 1e-5, 1, true},
                          Case{"synthetic:tiny-qwen3:f32:seed=43", 1e-5, 1, true},
                          Case{"synthetic:smollm2-135m:bf16:layers=2:seed=44", 1e-2, 1, true},
                          Case{"synthetic:smollm2-135m:q4_1:layers=2:seed=46", 1e-2, 1, true},
                          Case{"synthetic:smollm2-135m:bf16:layers=1:seed=47", 1e-2, 1, true, 16},
                          Case{"synthetic:smollm2-135m:f16:layers=1:seed=48", 1e-2, 1, true, 16},
                          Case{"synthetic:smollm2-135m:q8_0:layers=1:seed=49", 1e-2, 1, true, 16},
                          Case{"synthetic:smollm2-135m:q4_0:layers=1:seed=50", 1e-2, 1, true, 16},
                          Case{"synthetic:smollm2-135m:q4_1:layers=1:seed=51", 1e-2, 1, true, 16}}) {
        const auto path = std::filesystem::temp_directory_path() / (std::string("mk_ops_") + std::to_string(c.tol) +
                                                                      std::to_string(std::hash<std::string>{}(c.spec)) + ".gguf");
        write_synthetic_model(parse_synthetic_spec(c.spec), path);
        Model model = load_model(path);
        api::BackendOptions o;
        o.backend = test::cuda_backend("cuda");
        if (c.tp > 1) o.tp_loopback = c.tp;
        const uint32_t ctx_len = 64;
        Schedule schedule = resolve_schedule(model, o);
        if (c.prefill)
            schedule = compile_prefill_schedule(model.config, schedule.weights, schedule.target, parse_policy(o.policy),
                                                c.chunk, false);
        const uint32_t n_run = c.prefill ? c.chunk - 2 : 1;
        std::unique_ptr<DeviceState> state = upload_program_state(model, std::move(schedule), ctx_len);
        const Schedule& s = state->schedule;
        const ModelDims& d = s.dims;
        ModelWeights weights = bind_weights(model, s);

        std::mt19937 rng(7);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        HostMemory start;
        start.arena.resize(s.arena_bytes + 16);
        for (size_t i = 0; i + 4 <= start.arena.size(); i += 4) {
            const float v = uniform(rng);
            std::memcpy(start.arena.data() + i, &v, 4);
        }
        const size_t cache_floats = size_t(d.n_layers) * d.kv_dim() * ctx_len;
        for (auto* cache : {&start.k_cache, &start.v_cache}) {
            cache->resize(cache_floats);
            for (float& v : *cache) v = uniform(rng);
        }
        const int32_t pos = 37, token = 5;
        if (c.prefill)  // the chunk's tokens, as the host writes them
            for (uint32_t j = 0; j < c.chunk; ++j) {
                const int32_t id = int32_t(3 + 11 * j);
                std::memcpy(start.arena.data() + s.tokens_off + 4 * j, &id, 4);
            }
        DeviceBuffer step_state(12, "step state");
        const int32_t host_step[3] = {pos, token, int32_t(n_run)};
        step_state.upload(host_step, 12, "step state");

        std::map<uint16_t, int> tried;
        for (uint32_t sm = 0; sm < s.streams.size(); ++sm)
            for (uint32_t i = 0; i < s.streams[sm].size(); ++i) {
                const PreparedInstruction& p = state->prepared.streams[sm][i];
                // Three instructions of each op per model; every transfer (both copy widths).
                if (tried[p.ins->opcode]++ >= 3 && Opcode(p.ins->opcode) != Opcode::transfer) continue;
                covered.insert(p.ins->opcode);
                const OpInfo& op = *p.op;
                INFO(c.spec << ": " << op.describe(*p.ins));
                const std::vector<Access> writes = [&] {
                    std::vector<Access> w;
                    for (const Access& a : op.accesses(*p.ins, d))
                        if (a.write) w.push_back(a);
                    return w;
                }();
                HostMemory cpu = start, gpu = start;
                for (const Access& a : writes) {
                    poison(cpu, a, d, ctx_len, pos, n_run);
                    poison(gpu, a, d, ctx_len, pos, n_run);
                }
                // CPU.
                StepState step;
                step.pos = pos;
                step.token = token;
                step.n_tokens = int32_t(n_run);
                DirectTileReader reader;
                reader.begin(*p.plan, weights.refs.data());
                OpContext ctx;
                ctx.dims = &d;
                ctx.rope_inv_freq = weights.rope_inv_freq.data();
                ctx.arena = cpu.arena.data();
                const std::vector<uint8_t*> rank_arenas(s.tp_size, cpu.arena.data());  // shared layout, as on the GPU
                ctx.rank_arenas = rank_arenas.data();
                ctx.weights = weights.refs.data();
                ctx.k_cache = cpu.k_cache.data();
                ctx.v_cache = cpu.v_cache.data();
                ctx.ctx_len = ctx_len;
                ctx.step = &step;
                ctx.plan = p.plan;
                ctx.tiles = &reader;
                op.run_cpu(*p.ins, ctx);
                // GPU: the same instruction as a batch of one.
                state->ranks[0].arena.upload(gpu.arena.data(), gpu.arena.size(), "arena");
                state->ranks[0].k_cache.upload(gpu.k_cache.data(), 4 * cache_floats, "K cache");
                state->ranks[0].v_cache.upload(gpu.v_cache.data(), 4 * cache_floats, "V cache");
                BatchLaunch b{};
                b.opcode = p.ins->opcode;
                b.instructions = state->instructions.as<Instruction>() + p.flat;
                b.tile_begin = state->tile_begin.as<uint32_t>() + p.flat;
                b.tiles = state->tiles.as<DeviceTile>();
                b.weight_blob = state->blob.as<uint8_t>();
                b.ctx = state->ctx;
                b.step_state = step_state.as<int32_t>();
                b.count = 1;
                b.threads = kBatchMaxThreads;
                b.scratch_bytes = uint32_t(op_scratch_bytes(d));
                check_cuda(launch_instruction_batch(b, nullptr), "launching the op");
                check_cuda(cudaDeviceSynchronize(), "running the op");
                check_cuda(cudaMemcpy(gpu.arena.data(), state->ranks[0].arena.as<void>(), gpu.arena.size(), cudaMemcpyDeviceToHost), "arena");
                check_cuda(cudaMemcpy(gpu.k_cache.data(), state->ranks[0].k_cache.as<void>(), 4 * cache_floats, cudaMemcpyDeviceToHost), "K");
                check_cuda(cudaMemcpy(gpu.v_cache.data(), state->ranks[0].v_cache.as<void>(), 4 * cache_floats, cudaMemcpyDeviceToHost), "V");
                for (const Access& a : writes) {
                    const double err =
                        max_rel_error(region(gpu, a, d, ctx_len, pos, n_run), region(cpu, a, d, ctx_len, pos, n_run));
                    INFO("region [" << a.begin << ", " << a.end << ") of space " << int(a.space));
                    CHECK(err <= c.tol);
                }
            }
    }
    size_t with_device_code = 0;  // an MK_HOST_OP has none
    for (uint16_t op = 0; op < uint16_t(Opcode::count); ++op) with_device_code += has_device_code(op);
    CHECK(covered.size() == with_device_code);
}

}  // namespace mk

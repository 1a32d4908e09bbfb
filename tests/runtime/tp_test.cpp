// Tensor parallel on the CPU backend: the combined schedule of N emulated ranks against TP = 1 (the same
// greedy tokens, logits within 1e-4 relative L2 at every step; prefill chunks within 1e-5 at every position),
// and the verifier refusing a schedule whose cross-rank ordering or memory ownership is broken.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>

#include "instructions/reduce_add/reduce_add.hpp"
#include "instructions/sample/sampling.hpp"
#include "instructions/transfer/transfer.hpp"
#include "models/error.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/program.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/schedule_file.hpp"
#include "scheduler/verify.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_compare.hpp"

namespace mk {
namespace {

Schedule tp_schedule(const Model& model, const Target& target, uint32_t tp, KvType kv_type = KvType::f32) {
    const auto formats = tp_weight_formats(weight_formats(model), model_dims(model.config), tp);
    Schedule s = compile_schedule(model.config, formats, target, Policy::critical_path, tp, kv_type);
    const VerifyReport report = verify(s);  // every TP schedule the scheduler produces must verify
    INFO("tp " << tp << ": " << report.summary());
    REQUIRE(report.ok);
    REQUIRE(s.streams.size() == size_t(tp) * target.n_sms);
    return s;
}

struct Run {
    std::vector<int32_t> sampled;             // the greedy token after each step
    std::vector<std::vector<float>> logits;  // after each step
};

// `inputs` teacher-forced (so two runs see the same inputs even where their choices differ).
Run run(const Model& model, Schedule s, const std::vector<int32_t>& inputs, ProgramOptions o = {}) {
    if (!o.n_threads) o.n_threads = 2;
    o.ctx_len = 64;
    auto program = make_cpu_program(model, std::move(s), o);
    Run r;
    for (size_t p = 0; p < inputs.size(); ++p) {
        r.sampled.push_back(program->step(inputs[p], int32_t(p), {}, {}));
        auto l = program->logits();
        r.logits.emplace_back(l.begin(), l.end());
    }
    return r;
}

// The prompt, then TP = 1's own greedy continuation as the inputs of every run.
std::vector<int32_t> greedy_inputs(const Model& model, const Target& target, std::vector<int32_t> prompt, int generate) {
    const size_t n_prompt = prompt.size();
    prompt.resize(n_prompt + generate, 0);
    ProgramOptions o;
    o.n_threads = 2;
    o.ctx_len = 64;
    auto program = make_cpu_program(model, tp_schedule(model, target, 1), o);
    int32_t next = 0;
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
        next = program->step(prompt[p], int32_t(p), {}, {});
        if (p + 1 >= n_prompt) prompt[p + 1] = next;
    }
    return prompt;
}

void check_tp_matches_tp1(const Model& model, const Target& target, const std::vector<int32_t>& inputs,
                          std::initializer_list<uint32_t> tps, CpuDots dots = CpuDots::exact,
                          KvType kv_type = KvType::f32) {
    ProgramOptions o;
    o.dots = dots;
    const Run one = run(model, tp_schedule(model, target, 1, kv_type), inputs, o);
    for (uint32_t tp : tps) {
        const Run many = run(model, tp_schedule(model, target, tp, kv_type), inputs, o);
        for (size_t p = 0; p < inputs.size(); ++p) {
            INFO("tp " << tp << ", step " << p);
            // q16 re-quantizes activations whose partial sums were added in another order: TP agrees with
            // TP 1 within q16's own error (the 1e-3 its oracle test allows), exact dots within 1e-4.
            CHECK(test::rel_l2(many.logits[p], one.logits[p]) < (dots == CpuDots::q16 ? 1e-3 : 1e-4));
            CHECK(many.sampled[p] == one.sampled[p]);
        }
    }
}

Model synthetic(const std::string& spec, const std::string& file) {
    const auto path = test::output_dir() / file;
    write_synthetic_model(parse_synthetic_spec(spec), path);
    return load_model(path);
}

// A shape whose 6 KV heads split 2 and 3 ways, with a vocabulary that does not split evenly.
const char* const kSplitShape = "tiny-llama:{}:layers=2:d_model=192:heads=12:kv_heads=6:head_dim=16:ff=384:vocab=1000";

}  // namespace

TEST_CASE("TP=3 on SmolLM2-135M gives TP=1's greedy tokens and logits", "[cpu][model][tp]") {
    Model model = load_model(test::default_model_path());
    const auto prompt = model.tokenizer.encode("The capital of France is");
    const auto inputs = greedy_inputs(model, target_cpu(), prompt, 12);
    check_tp_matches_tp1(model, target_cpu(), inputs, {3});
    check_tp_matches_tp1(model, target_cpu(), inputs, {3}, CpuDots::q16);  // the CLI's default dots
    CHECK_THROWS_WITH(tp_weight_formats(weight_formats(model), model_dims(model.config), 2),
                      "--tp 2: the model's 3 KV heads do not split 2 ways (the TP size must divide the KV heads)");
}

TEST_CASE("TP=2 and TP=3 match TP=1 on a synthetic model in every block format", "[cpu][tp]") {
    for (const char* dtype : {"f32", "bf16", "q8_0", "q4_1"}) {
        INFO(dtype);
        Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=21"), dtype),
                                fmt::format("tp_split_{}.gguf", dtype));
        const auto inputs = greedy_inputs(model, target_custom(5, 232448), {1, 17, 400, 999, 3}, 5);
        check_tp_matches_tp1(model, target_custom(5, 232448), inputs, {2, 3});
    }
}

// Each rank writes and reads its own KV heads' bf16 rows, rounded from the same fp32 values as TP 1's.
TEST_CASE("TP=2 and TP=3 with a bf16 KV cache match TP=1's bf16 cache", "[cpu][tp]") {
    Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=22"), "bf16"),
                            "tp_split_kv_bf16.gguf");
    const auto inputs = greedy_inputs(model, target_custom(5, 232448), {1, 17, 400, 999, 3}, 5);
    check_tp_matches_tp1(model, target_custom(5, 232448), inputs, {2, 3}, CpuDots::exact, KvType::bf16);
}

TEST_CASE("one rank's weights bind as the whole schedule's, the others' as placeholders", "[cpu][tp]") {
    // What a GPU running only rank 1 binds: rank 1's weights byte for byte, nothing of rank 0's copied.
    Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=25"), "q8_0"),
                            "tp_bind_only.gguf");
    const Schedule s = tp_schedule(model, target_custom(3, 232448), 2);
    const std::vector<bool> rank1 = weights_read_by(s, s.target.n_sms, s.target.n_sms);
    const ModelWeights all = bind_weights(model, s), some = bind_weights(model, s, &rank1);
    REQUIRE(some.refs.size() == all.refs.size());
    CHECK(some.padded.size() < all.padded.size());  // rank 0's column slices are not copied
    uint32_t n_bound = 0;
    for (size_t id = 0; id < all.refs.size(); ++id) {
        const WeightRef &a = all.refs[id], &b = some.refs[id];
        INFO("weight " << id);
        CHECK((a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols && a.row_bytes == b.row_bytes));
        CHECK((a.data == nullptr) == (b.data == nullptr));
        if (!rank1[id] || !a.data) continue;
        ++n_bound;
        CHECK(std::memcmp(a.data, b.data, uint64_t(a.rows) * a.row_bytes) == 0);
    }
    CHECK(n_bound > 0);
    const std::vector<bool> too_few(3, true);
    CHECK_THROWS_WITH(bind_weights(model, s, &too_few), Catch::Contains("bind_only names 3 weights"));
}

TEST_CASE("TP=2 and TP=4 match TP=1 on the Llama-3.2-1B shape", "[cpu][tp]") {
    Model model = synthetic("synthetic:llama-3.2-1b:q4_1:layers=2:vocab=4096:seed=4", "tp_llama1b.gguf");
    const auto inputs = greedy_inputs(model, target_cpu(), {1, 791, 2864, 315, 3822, 374}, 4);
    check_tp_matches_tp1(model, target_cpu(), inputs, {2, 4});
}

TEST_CASE("a TP schedule runs clean under checked pages and the race detector, bit-identical on 1 and 3 threads",
          "[cpu][tp]") {
    Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=22"), "q8_0"),
                            "tp_checked.gguf");
    const std::vector<int32_t> inputs = {5, 6, 7, 8};
    const Schedule s = tp_schedule(model, target_custom(3, 232448), 3);
    ProgramOptions checked;
    checked.n_threads = 3;
    checked.check_pages = true;
    checked.detect_races = true;
    ProgramOptions single;
    single.n_threads = 1;
    CHECK(run(model, s, inputs, checked).logits == run(model, s, inputs, single).logits);

    // Saved and loaded, the combined schedule is the same program.
    const auto path = test::output_dir() / "tp3.mks";
    save_schedule(s, path.string());
    const Schedule loaded = load_schedule(path.string());
    CHECK(loaded.tp_size == 3);
    CHECK(loaded.rank_arena_bytes == s.rank_arena_bytes);
    CHECK(run(model, loaded, inputs, single).logits == run(model, s, inputs, single).logits);
}

TEST_CASE("the verifier refuses a dropped cross-rank wait and memory touched across ranks", "[cpu][tp]") {
    Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=23"), "f32"),
                            "tp_verify.gguf");
    const Schedule s = tp_schedule(model, target_custom(4, 232448), 2);

    // A reduce_add's wait for the peers' transfers of its chunk.
    std::optional<WaitRef> victim;
    uint32_t victim_rank = 0;
    for (uint32_t sm = 0; sm < s.streams.size() && !victim; ++sm)
        for (uint32_t i = 0; i < s.streams[sm].size() && !victim; ++i) {
            const Instruction& ins = s.streams[sm][i];
            if (ins.opcode != uint16_t(Opcode::reduce_add)) continue;
            for (uint32_t w = 0; w < ins.n_waits; ++w)
                if (s.counters[ins.waits[w].counter].name.find("_recv.") != std::string::npos) {
                    victim = WaitRef{sm, i, w};
                    victim_rank = s.rank_of_stream(sm);
                }
        }
    REQUIRE(victim);
    Schedule broken = s;
    Instruction& ins = broken.streams[victim->sm][victim->index];
    for (uint32_t k = victim->slot; k + 1 < ins.n_waits; ++k) ins.waits[k] = ins.waits[k + 1];
    ins.n_waits--;
    const VerifyReport report = verify(broken);
    INFO(report.summary());
    CHECK(report.count(VerifyCheck::race) > 0);
    // The race names the reduce and a transfer from the other rank.
    CHECK_THAT(report.summary(), Catch::Contains("reduce_add") &&
                                     Catch::Contains(fmt::format("transfer")) &&
                                     Catch::Contains(fmt::format("rank {}", victim_rank)));

    // The race detector catches the same schedule at run time.
    ProgramOptions o;
    o.n_threads = 2;
    o.ctx_len = 16;
    o.detect_races = true;
    std::string message;
    try {
        auto program = make_cpu_program(model, broken, o);
        for (int p = 0; p < 4; ++p) program->step(p + 1, p, {}, {});
    } catch (const Error& e) {
        message = e.what();
    }
    CHECK_THAT(message, Catch::Contains("race"));

    // A transfer aimed at its own rank, and a reduce on rank 1 writing rank 0's residual.
    broken = s;
    bool retargeted = false, moved = false;
    for (uint32_t sm = 0; sm < broken.streams.size(); ++sm)
        for (Instruction& i : broken.streams[sm]) {
            const uint32_t rank = broken.rank_of_stream(sm);
            if (i.opcode == uint16_t(Opcode::transfer) && !retargeted) {
                TransferArgs a = decode_args<TransferArgs>(i);
                a.dst_rank = rank;
                encode_args(a, i);
                retargeted = true;
            } else if (i.opcode == uint16_t(Opcode::reduce_add) && rank == 1 && !moved) {
                ReduceAddArgs a = decode_args<ReduceAddArgs>(i);
                a.x_off -= uint32_t(broken.rank_arena_bytes);
                encode_args(a, i);
                moved = true;
            }
        }
    REQUIRE((retargeted && moved));
    const VerifyReport ranks = verify(broken);
    INFO(ranks.summary());
    CHECK(ranks.count(VerifyCheck::ranks) >= 2);
    CHECK_THAT(ranks.summary(), Catch::Contains("sends to rank") && Catch::Contains("runs on rank 1 but writes arena"));
    // The CPU backend gives each rank its own arena, so it refuses the same schedule before running it,
    // verifier or not.
    ProgramOptions unchecked;
    unchecked.ctx_len = 16;
    CHECK_THROWS_WITH(make_cpu_program(model, broken, unchecked), Catch::Contains("outside rank"));

    // A rank-0 instruction (not a transfer) signalling a counter that rank 1 waits on: on separate GPUs it
    // would bump rank 0's copy of the counter and rank 1 would wait forever.
    broken = s;
    std::optional<uint16_t> remote;  // a counter only rank 1 waits on
    for (uint32_t sm = broken.target.n_sms; sm < broken.streams.size() && !remote; ++sm)
        for (const Instruction& i : broken.streams[sm])
            if (i.opcode == uint16_t(Opcode::reduce_add) && i.n_waits > 0) remote = i.waits[0].counter;
    REQUIRE(remote);
    Instruction* signaller = nullptr;
    for (uint32_t sm = 0; sm < broken.target.n_sms && !signaller; ++sm)
        for (Instruction& i : broken.streams[sm])
            if (i.opcode != uint16_t(Opcode::transfer) && i.n_signals > 0) {
                signaller = &i;
                break;
            }
    REQUIRE(signaller);
    signaller->signals[0].counter = *remote;
    const VerifyReport owners = verify(broken);
    INFO(owners.summary());
    CHECK(owners.count(VerifyCheck::ranks) >= 1);
    CHECK_THAT(owners.summary(), Catch::Contains("which rank 1 waits on") &&
                                     Catch::Contains("only a transfer may signal another rank's counter"));
    // The untouched schedule passes the same check.
    CHECK(verify(s).count(VerifyCheck::ranks) == 0);
}

// Prefill in chunks with TP = tp (all logits), from position 0: the logits of every prompt position.
std::vector<std::vector<float>> tp_prefill_logits(const Model& model, const Target& target, uint32_t tp, uint32_t chunk,
                                                  std::span<const int32_t> prompt) {
    const Schedule decode = tp_schedule(model, target, tp);
    Schedule prefill = compile_prefill_schedule(model.config, decode.weights, target, Policy::critical_path, chunk, true,
                                                KvType::f32, tp);
    const VerifyReport report = verify(prefill);  // every TP prefill schedule the scheduler produces must verify
    INFO("tp " << tp << " prefill " << chunk << ": " << report.summary());
    REQUIRE(report.ok);
    ProgramOptions o;
    o.n_threads = 2;
    o.ctx_len = 64;
    auto program = make_cpu_program(model, decode, o, std::move(prefill));
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < prompt.size(); i += chunk) {
        const size_t n = std::min<size_t>(chunk, prompt.size() - i);
        program->prefill(prompt.subspan(i, n), int32_t(i));
        const std::span<const float> all = program->prefill_logits();
        const size_t vocab = model.config.vocab_size;
        REQUIRE(all.size() == n * vocab);
        for (size_t j = 0; j < n; ++j) out.emplace_back(all.begin() + int64_t(j * vocab), all.begin() + int64_t((j + 1) * vocab));
    }
    // The decode steps continue from the prefilled cache: the next greedy token as TP 1's token by token.
    out.emplace_back(1, float(program->step(argmax(out.back().data(), uint32_t(out.back().size())),
                                            int32_t(prompt.size()), {}, {})));
    return out;
}

TEST_CASE("tensor-parallel prefill (TP=2, 3) gives TP=1's logits at every position and the same continuation",
          "[cpu][tp][prefill]") {
    for (const char* dtype : {"f32", "q8_0"}) {
        INFO(dtype);
        Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=26"), dtype),
                                fmt::format("tp_prefill_{}.gguf", dtype));
        const Target target = target_custom(5, 232448);
        const std::vector<int32_t> prompt = {1, 17, 400, 999, 3, 250, 77, 12, 640, 5, 301, 42, 808, 9, 2, 555, 6, 71, 900};
        // TP 1 token by token (19 positions, then its greedy token from the last one's logits).
        const std::vector<int32_t> inputs = greedy_inputs(model, target, prompt, 2);
        const Run one = run(model, tp_schedule(model, target, 1), inputs);
        for (uint32_t tp : {2u, 3u})
            for (uint32_t chunk : {1u, 7u, 16u}) {
                const auto got = tp_prefill_logits(model, target, tp, chunk, prompt);
                double worst = 0;
                for (size_t p = 0; p < prompt.size(); ++p) worst = std::max(worst, test::rel_l2(got[p], one.logits[p]));
                INFO("tp " << tp << ", chunks of " << chunk << ": worst relative L2 " << worst);
                CHECK(worst < 1e-5);
                CHECK(int32_t(got.back()[0]) == one.sampled[prompt.size()]);
            }
    }
}

TEST_CASE("the verifier refuses a TP prefill schedule whose sum does not wait for the peers", "[cpu][tp][prefill]") {
    Model model = synthetic(fmt::format(fmt::runtime(std::string("synthetic:") + kSplitShape + ":seed=27"), "f32"),
                            "tp_prefill_verify.gguf");
    const Schedule decode = tp_schedule(model, target_custom(4, 232448), 2);
    Schedule s = compile_prefill_schedule(model.config, decode.weights, decode.target, Policy::critical_path, 8, false,
                                          KvType::f32, 2);
    REQUIRE(verify(s).ok);
    CHECK(s.tp_size == 2);
    bool dropped = false;
    for (auto& stream : s.streams)
        for (Instruction& ins : stream)
            for (uint32_t w = 0; w < ins.n_waits && !dropped; ++w)
                if (ins.opcode == uint16_t(Opcode::reduce_add) &&
                    s.counters[ins.waits[w].counter].name.find("_recv.") != std::string::npos) {
                    for (uint32_t k = w; k + 1 < ins.n_waits; ++k) ins.waits[k] = ins.waits[k + 1];
                    ins.n_waits--;
                    dropped = true;
                }
    REQUIRE(dropped);
    const VerifyReport report = verify(s);
    INFO(report.summary());
    CHECK(report.count(VerifyCheck::race) > 0);
    CHECK_THAT(report.summary(), Catch::Contains("reduce_add") && Catch::Contains("transfer"));
}

TEST_CASE("a model that cannot split N ways is refused with the reason", "[cpu][tp]") {
    ModelDims d;
    d.n_layers = 1, d.d_model = 576, d.n_heads = 9, d.n_kv_heads = 3, d.head_dim = 64, d.d_ff = 1536, d.vocab = 100;
    std::vector<WeightFormat> formats(n_weight_ids(1), WeightFormat{uint32_t(DType::F32), 1, 576, 4 * 576});
    formats[layer_weight_id(0, LayerWeight::wo)] = {uint32_t(DType::Q4_K), 576, 576, 144ull * 576 / 256};
    CHECK_THROWS_WITH(tp_weight_formats(formats, d, 3),
                      "--tp 3: layer 0 wo has 576 columns in 256-element Q4_K blocks; 192 per rank is not whole blocks");
    CHECK_THROWS_WITH(tp_weight_formats(formats, d, 0), "--tp 0: the tensor-parallel size must be 1..64");
    d.d_ff = 1537;
    CHECK_THROWS_WITH(tp_weight_formats(formats, d, 3), "--tp 3: the FFN width 1537 does not split 3 ways");
}

}  // namespace mk

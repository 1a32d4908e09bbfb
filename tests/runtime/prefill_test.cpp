// Multi-token prefill (scheduler/prefill_graph.cpp, the *_rows ops) against the token-by-token decode path and the
// float64 oracle: logits at every prompt position for chunks of T in {1, 7, 16, 64} (prompts not a multiple of
// T), the greedy continuation after a prefilled prompt, and the verifier's proof of the prefill schedules.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "instructions/all_ops.hpp"
#include "instructions/sample/sampling.hpp"
#include "models/model.hpp"
#include "models/synthetic.hpp"
#include "runtime/program.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/tensor_parallel.hpp"
#include "scheduler/verify.hpp"
#include "tests/test_compare.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

namespace mk {
namespace {

constexpr uint32_t kChunks[] = {1, 7, 16, 64};

std::unique_ptr<Program> program_for(const Model& model, const Target& target, CpuDots dots, uint32_t chunk,
                                     bool all_logits = true) {
    const std::vector<WeightFormat> formats = weight_formats(model);
    Schedule decode = compile_schedule(model.config, formats, target, Policy::critical_path);
    std::optional<Schedule> prefill;
    if (chunk) {
        prefill = compile_prefill_schedule(model.config, formats, target, Policy::critical_path, chunk, all_logits);
        const VerifyReport report = verify(*prefill);  // every prefill schedule the scheduler produces must verify
        INFO(report.summary());
        REQUIRE(report.ok);
    }
    ProgramOptions o;
    o.n_threads = 2;
    o.ctx_len = 160;
    o.dots = dots;
    return make_cpu_program(model, std::move(decode), o, std::move(prefill));
}

// Logits at every position of `tokens`: token by token (chunk 0) or in prefill chunks of `chunk`.
std::vector<std::vector<float>> prompt_logits(Program& program, std::span<const int32_t> tokens, uint32_t chunk) {
    std::vector<std::vector<float>> out;
    program.reset();
    for (size_t i = 0; i < tokens.size();) {
        if (!chunk) {
            program.step(tokens[i], int32_t(i), {}, {});
            out.emplace_back(program.logits().begin(), program.logits().end());
            ++i;
            continue;
        }
        const size_t n = std::min<size_t>(chunk, tokens.size() - i);
        program.prefill(tokens.subspan(i, n), int32_t(i));
        const std::span<const float> all = program.prefill_logits();
        const size_t vocab = program.logits().size();
        REQUIRE(all.size() == n * vocab);
        for (size_t j = 0; j < n; ++j) out.emplace_back(all.begin() + int64_t(j * vocab), all.begin() + int64_t((j + 1) * vocab));
        // logits() is the chunk's last token's, as after a step
        CHECK(std::equal(program.logits().begin(), program.logits().end(), out.back().begin()));
        i += n;
    }
    return out;
}

// Where the prefill step keeps only each chunk's last token's logits (the last layer then runs after attention for
// that token alone, wherever a shorter chunk puts it: prefill_graph.cpp): (position, logits) after each chunk.
std::vector<std::pair<size_t, std::vector<float>>> chunk_last_logits(Program& program, std::span<const int32_t> tokens,
                                                                     uint32_t chunk) {
    std::vector<std::pair<size_t, std::vector<float>>> out;
    program.reset();
    for (size_t i = 0; i < tokens.size(); i += chunk) {
        const size_t n = std::min<size_t>(chunk, tokens.size() - i);
        program.prefill(tokens.subspan(i, n), int32_t(i));
        out.emplace_back(i + n - 1, std::vector<float>(program.logits().begin(), program.logits().end()));
    }
    return out;
}

std::vector<int32_t> some_tokens(size_t n, int64_t vocab, int64_t seed) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = int32_t((int64_t(i) * 7919 + seed * 104729 + 13) % vocab);
    return t;
}

// Prefill in every chunk size against token by token with the same dots.
void check_prefill_matches_steps(const Model& model, std::span<const int32_t> prompt, CpuDots dots, double tolerance) {
    auto steps = program_for(model, target_cpu(), dots, 0);
    const auto want = prompt_logits(*steps, prompt, 0);
    for (uint32_t chunk : kChunks) {
        auto program = program_for(model, target_cpu(), dots, chunk);
        const auto got = prompt_logits(*program, prompt, chunk);
        REQUIRE(got.size() == want.size());
        double worst = 0;
        for (size_t p = 0; p < want.size(); ++p) worst = std::max(worst, test::rel_l2(got[p], want[p]));
        INFO(fmt::format("{}: chunk {} ({} dots), {} positions: worst relative L2 {:.3g}", model.path.filename().string(),
                         chunk, dots == CpuDots::exact ? "exact" : "q16", want.size(), worst));
        CHECK(worst < tolerance);
        auto last_only = program_for(model, target_cpu(), dots, chunk, false);
        double worst_last = 0;
        for (const auto& [p, logits] : chunk_last_logits(*last_only, prompt, chunk))
            worst_last = std::max(worst_last, test::rel_l2(logits, want[p]));
        INFO(fmt::format("each chunk's last token only: worst relative L2 {:.3g}", worst_last));
        CHECK(worst_last < tolerance);
    }
}

// The oracle's prompt in chunks of `chunk` (logits at every position against its float64 ones, relative L2 within
// `tolerance`), then its greedy continuation through decode steps while its top-2 gap exceeds `margin` (a near-tie
// may go either way within the dots' error). Returns how many generated tokens it checked.
size_t check_prefill_against_oracle(const Model& model, const std::string& name, uint32_t chunk = 7,
                                  CpuDots dots = CpuDots::exact, double tolerance = 1e-5, double margin = 1e-3) {
    const auto path = test::output_dir() / ("oracle_" + name + ".json");
    std::ifstream in(path);
    INFO("oracle output " << path.string() << " (written by the oracle fixtures of this ctest run)");
    REQUIRE(in.good());
    const nlohmann::json j = nlohmann::json::parse(in);
    const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
    const auto logits = j.at("logits").get<std::vector<std::vector<double>>>();
    const auto generated = j.at("generated").get<std::vector<int32_t>>();
    const auto gap = j.at("top2_gap").get<std::vector<double>>();
    auto program = program_for(model, target_cpu(), dots, chunk);
    const auto got = prompt_logits(*program, tokens, chunk);
    for (size_t p = 0; p < tokens.size(); ++p) {
        INFO(name << " position " << p << ", chunks of " << chunk);
        CHECK(test::rel_l2(got[p], std::vector<float>(logits[p].begin(), logits[p].end())) < tolerance);
    }
    int32_t next = argmax(program->logits().data(), uint32_t(program->logits().size()));
    int32_t pos = int32_t(tokens.size());
    size_t checked = 0;
    for (size_t i = 0; i < generated.size() && gap[i] >= margin; ++i, ++checked) {
        INFO(name << " generated token " << i << ", chunks of " << chunk);
        REQUIRE(next == generated[i]);
        next = program->step(next, pos++, {}, {});
    }
    return checked;
}

}  // namespace

TEST_CASE("prefill logits equal token by token on synthetic models in every format", "[cpu][prefill]") {
    const char* const specs[] = {"tiny-llama:f32",  "tiny-llama:f16",  "tiny-llama:bf16", "tiny-llama:q8_0",
                                 "tiny-llama:q4_0", "tiny-llama:q4_1", "tiny-llama:q4_k", "tiny-llama:q6_k",
                                 "tiny-qwen2:f16",  "tiny-qwen3:q8_0", "tiny-llama3:q4_1"};
    for (const char* spec : specs) {
        INFO(spec);
        std::string file = fmt::format("prefill_{}.gguf", spec);
        std::replace(file.begin(), file.end(), ':', '_');
        const Model model = load_model(test::synthetic_model_file(fmt::format("synthetic:{}:seed=31", spec), file));
        const std::vector<int32_t> prompt = some_tokens(75, model.config.vocab_size, 1);  // 75 = 64 + 7 + 4
        check_prefill_matches_steps(model, prompt, CpuDots::exact, 1e-5);
        check_prefill_matches_steps(model, prompt, CpuDots::q16, 1e-3);
    }
}

// [slow]: not in the sanitizer builds (156 s of ASan's 294 at -O1, 2026-12-07), where the synthetic models above run
// the same ops in every format.
TEST_CASE("prefill on SmolLM2-135M equals token by token, and its greedy continuation matches the oracle",
          "[cpu][model][prefill][oracle][slow]") {
    MK_SKIP_IF_MISSING(test::default_model_path(), "./tools/setup.sh");
    const Model model = load_model(test::default_model_path());
    const std::vector<int32_t> prompt = some_tokens(70, model.config.vocab_size, 2);
    check_prefill_matches_steps(model, prompt, CpuDots::exact, 1e-5);
    check_prefill_matches_steps(model, prompt, CpuDots::q16, 1e-3);
    for (const char* name : {"smollm2_france", "smollm2_eiffel"}) check_prefill_against_oracle(model, name);
    // A 104-token prompt (the Declaration's first paragraph, oracle.cmake): uneven chunks (7: 14 x 7 + 6; 64: 64 + 40)
    // with exact dots, and the default path (q16 dots, -b 256: one chunk) within the 1e-3; its continuation
    // has no near-tie (smallest top-2 gap 0.165), so all 32 tokens are compared.
    CHECK(check_prefill_against_oracle(model, "smollm2_long", 7) == 32);
    CHECK(check_prefill_against_oracle(model, "smollm2_long", 64) == 32);
    CHECK(check_prefill_against_oracle(model, "smollm2_long", 256, CpuDots::q16, 1e-3, 0.05) == 32);
}

TEST_CASE("prefill schedules verify, and a dropped attention wait is refused", "[cpu][prefill]") {
    const ModelConfig config = synthetic_config(parse_synthetic_spec("synthetic:smollm2-135m:q4_1:layers=2:vocab=2048"));
    const std::vector<WeightFormat> formats =
        synthetic_weight_formats(parse_synthetic_spec("synthetic:smollm2-135m:q4_1:layers=2:vocab=2048"));
    for (const Target& target : {target_cpu(), target_h200(), target_custom(3, 232448)})
        for (uint32_t chunk : kChunks)
            for (bool all : {false, true}) {
                Schedule s = compile_prefill_schedule(config, formats, target, Policy::critical_path, chunk, all);
                VerifyReport report = verify(s);
                INFO(target.name << " chunk " << chunk << ": " << report.summary());
                REQUIRE(report.ok);
                CHECK(s.prefill_tokens == chunk);
            }
    // With tensor parallelism rank 0's embed waits for two groups of the previous chunk (its LM head, and the
    // peers' logits slices), which its stream must both keep (it once kept only the first: on this 1B shape
    // with T = 64 a peer's LM-head slice could then be overwritten while its transfer still read it).
    for (const char* spec : {"synthetic:smollm2-135m:q4_1:layers=2:vocab=2048", "synthetic:llama-3.2-1b:bf16:layers=2"}) {
        const SyntheticSpec shape = parse_synthetic_spec(spec);
        const ModelConfig tp_config = synthetic_config(shape);
        const uint32_t tp = uint32_t(tp_config.n_kv_heads) % 2 == 0 ? 2 : 3;
        const std::vector<WeightFormat> tp_formats =
            tp_weight_formats(synthetic_weight_formats(shape), model_dims(tp_config), tp);
        for (uint32_t chunk : {7u, 64u}) {
            Schedule s = compile_prefill_schedule(tp_config, tp_formats, target_h200(), Policy::critical_path, chunk,
                                                  chunk == 7, KvType::f32, tp);
            VerifyReport report = verify(s);
            INFO(spec << " TP " << tp << " chunk " << chunk << ": " << report.summary());
            REQUIRE(report.ok);
            CHECK(s.tp_size == tp);
        }
    }
    Schedule s = compile_prefill_schedule(config, formats, target_cpu(), Policy::critical_path, 16, false);
    bool dropped = false;
    for (auto& stream : s.streams)
        for (Instruction& ins : stream)
            if (!dropped && ins.opcode == uint16_t(Opcode::attn_rows) && ins.n_waits > 0) {
                ins.n_waits = 0;
                dropped = true;
            }
    REQUIRE(dropped);
    CHECK_FALSE(verify(s).ok);
}

// Where only the last token's logits are wanted, the last layer after attention runs as a chunk of one token: its
// residual stream and attention output copied out (two last_token_row), o, gate_up, down and the LM head on those
// copies; every other layer's projections, and every layer's with all logits, take the whole chunk.
TEST_CASE("prefill: the last layer's projections for the last token alone", "[cpu][prefill]") {
    const SyntheticSpec shape = parse_synthetic_spec("synthetic:llama-3.2-1b:bf16:layers=3:vocab=2048");
    const ModelConfig config = synthetic_config(shape);
    const std::vector<WeightFormat> formats = synthetic_weight_formats(shape);
    const ModelDims d = model_dims(config);
    for (const Target& target : {target_cpu(), target_h200()})
        for (bool all : {false, true}) {
            const uint32_t chunk = 100;
            const Schedule s = compile_prefill_schedule(config, formats, target, Policy::critical_path, chunk, all);
            INFO(target.name << (all ? " all logits" : " last token's logits"));
            uint32_t copies = 0, one_token_rows = 0;
            uint64_t lm_outputs = 0;  // (row, token) pairs of logits
            uint64_t chunk_outputs = 0;  // (row, token) pairs of the whole-chunk o and down
            for (const auto& stream : s.streams)
                for (const Instruction& ins : stream) {
                    if (ins.opcode == uint16_t(Opcode::last_token_row)) {
                        ++copies;
                    } else if (ins.opcode == uint16_t(Opcode::matmul_add)) {
                        const auto a = decode_args<MatmulAddArgs>(ins);
                        if (a.n_tok == 1)
                            one_token_rows += a.n_rows;
                        else
                            chunk_outputs += uint64_t(a.n_rows) * a.tokens().count();
                    } else if (ins.opcode == uint16_t(Opcode::rms_gate_up_rows)) {
                        const auto a = decode_args<RmsGateUpRowsArgs>(ins);
                        CHECK(a.n_tok == (!all && a.layer == 2 ? 1u : chunk));
                    } else if (ins.opcode == uint16_t(Opcode::rms_lm_head_rows)) {
                        const auto a = decode_args<RmsLmHeadRowsArgs>(ins);
                        CHECK(a.n_tok == (all ? chunk : 1u));
                        lm_outputs += uint64_t(a.n_rows) * a.tokens().count();
                    }
                }
            CHECK(copies == (all ? 0u : 2u));
            // o and down: d_model rows each, a layer
            CHECK(one_token_rows == (all ? 0u : 2 * d.d_model));
            CHECK(chunk_outputs == (all ? 3u : 2u) * 2ull * d.d_model * chunk);
            CHECK(lm_outputs == uint64_t(d.vocab) * (all ? chunk : 1u));  // every logit once (token blocks if all)
            CHECK(verify(s).ok);
        }
}

// The chunk's embedding is spread over the SMs in token blocks that tile it, and the projections' token blocks are
// multiples of 16 tokens on the CPU target (its 16-token kernels) and of 8 where weights take tensor cores (a 56-token
// block fills a 128-row pass), the chunk's tail aside.
TEST_CASE("prefill token blocks: the embedding over the SMs, projections in aligned blocks", "[cpu][prefill]") {
    const SyntheticSpec shape = parse_synthetic_spec("synthetic:llama-3.2-1b:bf16:layers=2:vocab=2048");
    const ModelConfig config = synthetic_config(shape);
    const std::vector<WeightFormat> formats = synthetic_weight_formats(shape);
    for (const Target& target : {target_cpu(), target_h200()})
        for (uint32_t chunk : {7u, 100u, 512u}) {
            const Schedule s = compile_prefill_schedule(config, formats, target, Policy::critical_path, chunk, false);
            INFO(target.name << " chunk " << chunk);
            const uint32_t align = target.name == "cpu" ? 16 : 8;
            std::vector<TokenBlock> embed;
            uint32_t projections = 0;
            auto check_block = [&](uint32_t tok_begin, uint32_t tok_count) {
                const TokenBlock b = token_block(tok_begin, tok_count, chunk);
                CHECK(b.begin % align == 0);
                if (b.end != chunk) CHECK(b.count() % align == 0);
                ++projections;
            };
            for (const auto& stream : s.streams)
                for (const Instruction& ins : stream) {
                    if (ins.opcode == uint16_t(Opcode::embed_rows)) {
                        const auto a = decode_args<EmbedRowsArgs>(ins);
                        embed.push_back(token_block(a.tok_begin, a.tok_count, a.n_tok));
                    } else if (ins.opcode == uint16_t(Opcode::matmul_add)) {
                        const auto a = decode_args<MatmulAddArgs>(ins);
                        check_block(a.tok_begin, a.tok_count);
                    } else if (ins.opcode == uint16_t(Opcode::rms_qkv_rows)) {
                        const auto a = decode_args<RmsQkvRowsArgs>(ins);
                        check_block(a.tok_begin, a.tok_count);
                    } else if (ins.opcode == uint16_t(Opcode::rms_gate_up_rows)) {
                        const auto a = decode_args<RmsGateUpRowsArgs>(ins);
                        check_block(a.tok_begin, a.tok_count);
                    }
                }
            CHECK(projections > 0);
            std::sort(embed.begin(), embed.end(), [](TokenBlock x, TokenBlock y) { return x.begin < y.begin; });
            const uint32_t per_block = (chunk + std::min(chunk, target.n_sms) - 1) / std::min(chunk, target.n_sms);
            CHECK(embed.size() == (chunk + per_block - 1) / per_block);  // as many SMs as have a block
            uint32_t next = 0;
            for (const TokenBlock& b : embed) {
                CHECK(b.begin == next);
                CHECK(b.count() > 0);
                next = b.end;
            }
            CHECK(next == chunk);
        }
}

}  // namespace mk

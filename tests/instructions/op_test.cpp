// The registry-driven op test: every op of ops.def x its generated cases (shapes, weight formats) x every
// backend, against the op's float64 reference with the op's tolerance. It also holds the spec to its
// accesses: the reference's outputs are exactly the op's declared writes, and nothing else changes.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "instructions/common/page_plan.hpp"
#include "instructions/common/token_rows.hpp"
#include "instructions/embed/embed.hpp"
#include "instructions/registry.hpp"
#include "tests/instructions/op_backend.hpp"

namespace mk {
namespace {

constexpr uint64_t kSeed = 20261203;

// Which arena bytes and cache floats an instruction may write: its declared write accesses.
struct WriteMask {
    std::vector<bool> arena, k_cache, v_cache;
    explicit WriteMask(const OpBuffers& b)
        : arena(b.arena.size(), false), k_cache(b.k_cache.size(), false), v_cache(b.v_cache.size(), false) {}
    std::vector<bool>& of(Space space) { return space == Space::arena ? arena : space == Space::k_cache ? k_cache : v_cache; }
    // Marks [begin, end) of `space`, false when it runs outside the buffer.
    bool mark(Space space, uint64_t begin, uint64_t end) {
        std::vector<bool>& m = of(space);
        if (end > m.size()) return false;
        std::fill(m.begin() + int64_t(begin), m.begin() + int64_t(end), true);
        return true;
    }
};

// The spec's writes: arena bytes, and KV element slots at the step's positions (slot = layer * kv_dim + d).
WriteMask declared_writes(const Instruction& ins, const OpBuffers& b) {
    WriteMask m(b);
    const uint32_t kv_dim = b.dims.kv_dim();
    for (const Access& a : op_info(ins.opcode).accesses(ins, b.dims)) {
        if (!a.write) continue;
        if (a.space == Space::arena) {
            REQUIRE(m.mark(a.space, a.begin, a.end));
            continue;
        }
        REQUIRE(a.pos == PosMode::at_pos);  // ops write the step's positions only (a prefill chunk's n_pos)
        for (uint32_t p = 0; p < a.n_pos; ++p)
            for (uint64_t slot = a.begin; slot < a.end; ++slot) {
                const uint64_t i = b.cache_index(uint32_t(slot / kv_dim), uint32_t(slot % kv_dim / b.dims.head_dim),
                                                 b.step.pos + int32_t(a.pos_offset + p)) + slot % b.dims.head_dim;
                REQUIRE(m.mark(a.space, i, i + 1));
            }
    }
    return m;
}

WriteMask expected_writes(const std::vector<Expected>& expected, const OpBuffers& b) {
    WriteMask m(b);
    for (const Expected& e : expected) {
        const uint64_t n = e.check == Check::real ? e.values.size() : 1;
        const uint64_t unit = e.space == Space::arena ? 4 : 1;
        INFO(e.what);
        REQUIRE(m.mark(e.space, e.begin, e.begin + n * unit));
    }
    return m;
}

// The first place where two masks differ, or "".
std::string first_difference(WriteMask& a, WriteMask& b) {
    for (Space s : {Space::arena, Space::k_cache, Space::v_cache}) {
        const auto [x, y] = std::mismatch(a.of(s).begin(), a.of(s).end(), b.of(s).begin());
        if (x != a.of(s).end())
            return fmt::format("{} {}: the op's accesses {} it, its reference {}",
                               s == Space::arena ? "arena byte" : "cache float", x - a.of(s).begin(),
                               *x ? "write" : "do not write", *y ? "writes it" : "does not");
    }
    return "";
}

float f32_at(const OpBuffers& b, const Expected& e, uint64_t i) {
    if (e.space != Space::arena) return (e.space == Space::k_cache ? b.k_cache : b.v_cache)[e.begin + i];
    float v;
    std::memcpy(&v, &b.arena[e.begin + 4 * i], 4);
    return v;
}

// The mismatches of one expected range, as "what[i]: got g, want w (tolerance t)"; `shown` caps the list.
std::vector<std::string> mismatches(const Expected& e, const OpBuffers& got, double rel, size_t& count, size_t shown) {
    std::vector<std::string> out;
    double scale = 0.0;
    for (double v : e.values)
        if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
    const double tol = rel * (scale > 0.0 ? scale : 1.0);
    if (e.check != Check::real) {
        int32_t index;
        std::memcpy(&index, &got.arena[e.begin], 4);
        if (e.check == Check::i32 && index != int32_t(e.values[0]))
            count++, out.push_back(fmt::format("{}: got {}, want {}", e.what, index, int32_t(e.values[0])));
        if (e.check == Check::argmax) {
            const double best = *std::max_element(e.values.begin(), e.values.end());
            const int64_t k = int64_t(index) - e.index_base;
            if (k < 0 || k >= int64_t(e.values.size()) || e.values[size_t(k)] < best - tol)
                count++, out.push_back(fmt::format("{}: got {} (score {}), want an index within {} of the best score {}", e.what,
                                          index, k >= 0 && k < int64_t(e.values.size()) ? e.values[size_t(k)] : NAN,
                                          tol, best));
        }
        return out;
    }
    for (uint64_t i = 0; i < e.values.size(); ++i) {
        const double g = f32_at(got, e, i), w = e.values[i];
        const bool ok = std::isfinite(w) ? std::fabs(g - w) <= tol : g == w;
        if (!ok && count++ < shown)
            out.push_back(fmt::format("{}[{}]: got {}, want {} (tolerance {:.3g})", e.what, i, g, w, tol));
    }
    return out;
}

// The first byte or float outside the declared writes that the run changed, or "".
std::string stray_write(const OpBuffers& before, const OpBuffers& after, WriteMask& allowed) {
    for (size_t i = 0; i < before.arena.size(); ++i)
        if (!allowed.arena[i] && before.arena[i] != after.arena[i]) return fmt::format("arena byte {}", i);
    for (Space s : {Space::k_cache, Space::v_cache}) {  // bitwise, as the arena
        const std::vector<float>& was = s == Space::k_cache ? before.k_cache : before.v_cache;
        const std::vector<float>& is = s == Space::k_cache ? after.k_cache : after.v_cache;
        for (size_t i = 0; i < was.size(); ++i)
            if (!allowed.of(s)[i] && std::memcmp(&was[i], &is[i], 4) != 0)
                return fmt::format("{} cache float {}", s == Space::k_cache ? "K" : "V", i);
    }
    return "";
}

}  // namespace

TEST_CASE("every op matches its float64 reference on every backend", "[cpu]") {
    const auto backends = op_backends();
    std::map<std::string, std::vector<std::string>> skipped;  // by backend: cases in formats or ops it does not run
    for (uint16_t opcode = 0; opcode < uint16_t(Opcode::count); ++opcode) {
        const OpReference& ref = op_reference(opcode);
        DYNAMIC_SECTION(ref.name) {
            const std::vector<OpCase> cases = ref.cases(kSeed + 1000ull * opcode);
            REQUIRE(!cases.empty());  // an op with a reference but no cases tests nothing
            for (const OpCase& c : cases) {
                INFO(c.name);
                REQUIRE(c.ins.opcode == opcode);
                const std::vector<Expected> expected = ref.reference(c.ins, c.buffers);
                WriteMask declared = declared_writes(c.ins, c.buffers), produced = expected_writes(expected, c.buffers);
                const std::string drift = first_difference(declared, produced);
                {
                    INFO("accesses vs reference: " << drift);
                    CHECK(drift.empty());
                }
                for (const auto& backend : backends) {
                    if (!backend->accepts(c.ins, c.buffers)) {
                        skipped[backend->name()].push_back(c.name);
                        continue;
                    }
                    INFO("backend " << backend->name());
                    OpBuffers run = c.buffers;
                    backend->run(c.ins, run);
                    size_t count = 0;
                    std::vector<std::string> first;
                    for (const Expected& e : expected)
                        for (std::string& m :
                             mismatches(e, run, ref.tolerance.rel + backend->extra_rel(c.ins, c.buffers) + e.extra_rel, count, 5))
                            first.push_back(std::move(m));
                    {
                        INFO(fmt::format("{} mismatches; the first: {}", count, fmt::join(first, "; ")));
                        CHECK(count == 0);
                    }
                    const std::string stray = stray_write(c.buffers, run, declared);
                    INFO("changed outside the declared writes: " << stray);
                    CHECK(stray.empty());
                }
            }
        }
    }
    for (const auto& [name, cases] : skipped)
        WARN(name << " does not run " << cases.size() << " case(s) (formats its device code does not decode, ops it has "
                     "no device code for): "
                  << fmt::format("{}", fmt::join(cases, ", ")));
}

// A token outside the vocabulary never reaches embed (the host checks it), but if one did: the CPU op
// refuses it with an error, and the device code, which cannot throw, writes zeros instead of reading outside
// the table.
TEST_CASE("embed of a token outside the vocabulary: the CPU refuses it, the device writes zeros", "[cpu]") {
    const OpCase c = op_reference(uint16_t(Opcode::embed)).cases(kSeed).front();
    const auto a = decode_args<EmbedArgs>(c.ins);
    const uint32_t vocab = c.buffers.formats.at(a.weight).rows;
    for (const int32_t token : {int32_t(vocab), int32_t(vocab) + 1000, -1}) {
        INFO("token " << token);
        OpBuffers run = c.buffers;
        run.step.token = token;
        std::vector<float> x(a.d_model, 1.5f);  // not zero, so the zeros below were written
        std::memcpy(run.arena.data() + a.x_off, x.data(), x.size() * sizeof(float));
        CHECK_THROWS_WITH(make_cpu_op_backend(CpuDots::exact)->run(c.ins, run),
                          Catch::Contains("outside the vocabulary"));
#if MK_OP_TEST_EMU
        make_emu_op_backend()->run(c.ins, run);
        std::memcpy(x.data(), run.arena.data() + a.x_off, x.size() * sizeof(float));
        CHECK(std::all_of(x.begin(), x.end(), [](float v) { return v == 0.0f; }));
#endif
    }
}

// The tensor-core path is taken only where the page plan streams MMA tiles: the reference cases above must include
// such plans for every prefill rows op in every format that takes it (BF16, F16, Q8_0, Q4_0, Q4_1; 8 to 112 tokens), or the
// emulated device code they check is the scalar path alone. Each case's plan is also checked against its weights: 16-row
// groups, slices that tile the rows; and without tensor cores, whole rows.
TEST_CASE("the prefill rows ops' cases of 8+ tokens in the MMA formats stream MMA tiles", "[cpu]") {
    uint32_t row_copy_tiles = 0;
    std::map<DType, uint32_t> q4_cases;
    for (Opcode opcode : {Opcode::rms_qkv_rows, Opcode::matmul_add, Opcode::rms_gate_up_rows, Opcode::rms_lm_head_rows}) {
        const OpReference& ref = op_reference(uint16_t(opcode));
        INFO(ref.name);
        std::map<DType, uint32_t> mma_cases;
        for (const OpCase& c : ref.cases(kSeed)) {
            const PagePlan plan = op_info(c.ins.opcode).page_plan(c.ins, c.buffers.plan_inputs());
            if (plan.tiles.empty() || plan.tiles[0].whole_rows()) continue;
            INFO(c.name);
            ++mma_cases[DType(c.buffers.formats.at(plan.tiles[0].weight).dtype)];
            std::map<std::pair<uint32_t, uint32_t>, uint32_t> covered;  // (weight, row) -> columns streamed
            for (const Tile& t : plan.tiles) {
                CHECK(!t.whole_rows());
                const WeightFormat& w = c.buffers.formats.at(t.weight);
                const uint32_t span = mma_span_cols(w.dtype);
                const bool whole_width = t.col_begin == 0 && t.n_cols == w.cols;
                CHECK((span != 0 && t.n_rows >= 1 && t.n_rows <= kMmaGroupRows && (t.n_cols % span == 0 || whole_width)));
                if (!mma_spans_fit(w.dtype, w.cols, w.row_bytes)) {  // one contiguous copy, 16-byte aligned
                    ++row_copy_tiles;
                    CHECK(whole_width);
                    CHECK(t.bytes % 16 == 0);
                    CHECK(uint64_t(t.row_begin) * w.row_bytes % 16 == 0);
                }
                CHECK(t.bytes == t.n_rows * (w.row_bytes * t.n_cols / w.cols));
                CHECK(t.bytes <= c.buffers.page_bytes);
                for (uint32_t r = 0; r < t.n_rows; ++r) {
                    uint32_t& cols = covered[{t.weight, t.row_begin + r}];
                    CHECK(t.col_begin == cols);  // slices in column order, none skipped
                    cols += t.n_cols;
                }
            }
            for (const auto& [key, cols] : covered) CHECK(cols == c.buffers.formats.at(key.first).cols);
            // A target without tensor cores (the CPU's own) streams the same instruction in whole rows.
            PlanInputs cpu = c.buffers.plan_inputs();
            cpu.tensor_cores = false;
            const PagePlan rows = op_info(c.ins.opcode).page_plan(c.ins, cpu);
            CHECK(std::all_of(rows.tiles.begin(), rows.tiles.end(), [](const Tile& t) { return t.whole_rows(); }));
        }
        CHECK(mma_cases[DType::BF16] > 0);
        CHECK(mma_cases[DType::F16] > 0);
        CHECK(mma_cases[DType::Q8_0] > 0);
        CHECK(mma_cases[DType::Q4_0] + mma_cases[DType::Q4_1] > 0);  // one device branch takes both (a flag apart)
        q4_cases[DType::Q4_0] += mma_cases[DType::Q4_0], q4_cases[DType::Q4_1] += mma_cases[DType::Q4_1];
    }
    CHECK(q4_cases[DType::Q4_0] > 0);
    CHECK(q4_cases[DType::Q4_1] > 0);
    CHECK(row_copy_tiles > 0);  // rows that are not whole spans (matmul_add's Q4_1 at 64 columns: 40 bytes)
}

}  // namespace mk


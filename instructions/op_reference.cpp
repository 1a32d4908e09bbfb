// The reference registry (one entry per line of ops.def) and the helpers the references and cases share.
#include "instructions/op_reference.hpp"

#include <cmath>
#include <cstring>

#include "instructions/all_ops.hpp"
#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

namespace {
const OpReference kReferences[] = {
#define MK_OP(snake, Pascal) {#snake, &Pascal##Op::reference, &Pascal##Op::cases, Pascal##Op::tolerance},
#include "instructions/ops.def"
#undef MK_OP
};
static_assert(sizeof(kReferences) / sizeof(kReferences[0]) == size_t(Opcode::count));

constexpr uint64_t kAlign = 256;  // as the graph's buffers
}  // namespace

const OpReference& op_reference(uint16_t opcode) {
    if (!is_valid_opcode(opcode)) fail("unknown opcode {}", opcode);
    return kReferences[opcode];
}

CaseBuilder::CaseBuilder(const ModelDims& dims, uint64_t seed, uint32_t n_ranks, uint64_t rank_bytes)
    : rng_(seed), used_(n_ranks, 0) {
    if (n_ranks > 1 && rank_bytes % kAlign != 0) fail("case: {} ranks need a region size, a multiple of {}", n_ranks, kAlign);
    b_.dims = dims;
    b_.n_ranks = n_ranks;
    b_.rank_arena_bytes = rank_bytes;
}

uint32_t CaseBuilder::activation(uint64_t n, float scale, uint32_t rank) {
    const uint64_t offset = (used_.at(rank) + kAlign - 1) / kAlign * kAlign;
    used_[rank] = offset + 4 * n;
    if (b_.n_ranks > 1 && used_[rank] > b_.rank_arena_bytes) fail("case: rank {}'s buffers exceed its region", rank);
    std::vector<float> values(n);
    for (float& v : values) v = uniform(-scale, scale);
    const uint64_t global = offset + rank * b_.rank_arena_bytes;
    fills_.push_back({global, std::move(values)});
    return uint32_t(global);
}

uint32_t CaseBuilder::weight(DType dtype, uint32_t rows, uint32_t cols, float scale) {
    WeightFormat f;
    f.dtype = uint32_t(dtype);
    f.rows = rows;
    f.cols = cols;
    f.row_bytes = row_bytes(dtype, cols);
    // A Q8_0 MMA tile is 16 rows of at least 256 columns (272 bytes: mma_span_cols), over the small pages' 4096.
    if (dtype == DType::Q8_0 && cols % 256 == 0) b_.page_bytes = std::max<uint64_t>(b_.page_bytes, 16 * row_bytes(dtype, 256));
    std::vector<uint8_t> bytes(f.row_bytes * rows);
    std::vector<float> row(cols);
    for (uint32_t r = 0; r < rows; ++r) {
        for (float& v : row) v = uniform(-scale, scale);
        quantize_row(dtype, row.data(), bytes.data() + r * f.row_bytes, cols);
    }
    b_.formats.push_back(f);
    b_.weights.push_back(std::move(bytes));
    return uint32_t(b_.formats.size() - 1);
}

void CaseBuilder::caches(uint32_t ctx_len) {
    const ModelDims& d = b_.dims;
    b_.ctx_len = ctx_len;
    const uint64_t n = uint64_t(d.n_layers) * d.n_kv_heads * ctx_len * d.head_dim;
    const bool bf16 = d.kv_type == uint32_t(KvType::bf16);
    for (auto* cache : {&b_.k_cache, &b_.v_cache}) {
        cache->resize(n);
        for (float& v : *cache) v = bf16 ? bf16_to_f32(f32_to_bf16(uniform(-1.0f, 1.0f))) : uniform(-1.0f, 1.0f);
    }
    b_.rope_inv_freq.resize(d.head_dim / 2);
    for (uint32_t i = 0; i < d.head_dim / 2; ++i)
        b_.rope_inv_freq[i] = float(std::pow(10000.0, -2.0 * i / d.head_dim));
}

OpCase CaseBuilder::finish(std::string name, const Instruction& ins) {
    if (b_.n_ranks == 1) b_.rank_arena_bytes = (used_[0] + kAlign - 1) / kAlign * kAlign;
    b_.arena.resize(b_.rank_arena_bytes * b_.n_ranks);
    for (size_t i = 0; i < b_.arena.size(); i += 4) {  // non-zero filler where no buffer lies
        const float v = uniform(0.5f, 1.5f);
        std::memcpy(&b_.arena[i], &v, 4);
    }
    for (const auto& [offset, values] : fills_) std::memcpy(&b_.arena[offset], values.data(), 4 * values.size());
    fills_.clear();
    return {std::move(name), ins, std::move(b_)};
}

std::vector<double> ref_f32(const OpBuffers& b, uint64_t byte_offset, uint64_t n) {
    if (byte_offset + 4 * n > b.arena.size())
        fail("reference: arena bytes [{}, {}) outside {}", byte_offset, byte_offset + 4 * n, b.arena.size());
    std::vector<double> out(n);
    for (uint64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, &b.arena[byte_offset + 4 * i], 4);
        out[i] = v;
    }
    return out;
}

std::vector<double> ref_row(const OpBuffers& b, uint32_t weight, uint32_t row) {
    const WeightFormat& f = b.formats.at(weight);
    if (row >= f.rows) fail("reference: row {} of weight {} with {} rows", row, weight, f.rows);
    std::vector<float> values(f.cols);
    dequantize_row(DType(f.dtype), b.weights[weight].data() + row * f.row_bytes, values.data(), f.cols);
    return {values.begin(), values.end()};
}

double ref_dot(const std::vector<double>& a, const std::vector<double>& b) {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
    return sum;
}

std::vector<double> ref_rms_norm(const OpBuffers& b, const std::vector<double>& x, uint32_t norm_weight) {
    const std::vector<double> w = ref_row(b, norm_weight, 0);
    const double scale = 1.0 / std::sqrt(ref_dot(x, x) / double(x.size()) + b.dims.norm_eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = w[i] * x[i] * scale;
    return out;
}

Expected ref_arena(std::string what, uint64_t byte_offset, std::vector<double> values) {
    return {std::move(what), Space::arena, byte_offset, std::move(values)};
}

std::vector<uint8_t> OpBuffers::stored_cache(Space space) const {
    const std::vector<float>& values = space == Space::k_cache ? k_cache : v_cache;
    std::vector<uint8_t> out(values.size() * dims.kv_bytes());
    if (dims.kv_type != uint32_t(KvType::bf16)) {
        if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());  // an op without a cache: no pointers
        return out;
    }
    for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t bits = f32_to_bf16(values[i]);
        std::memcpy(out.data() + 2 * i, &bits, 2);
    }
    return out;
}

void OpBuffers::load_stored_cache(Space space, const uint8_t* bytes) {
    std::vector<float>& values = space == Space::k_cache ? k_cache : v_cache;
    if (dims.kv_type != uint32_t(KvType::bf16)) {
        if (!values.empty()) std::memcpy(values.data(), bytes, 4 * values.size());
        return;
    }
    for (size_t i = 0; i < values.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        values[i] = bf16_to_f32(bits);
    }
}

Expected ref_kv_store(const OpBuffers& b, std::string what, Space space, uint64_t begin, std::vector<double> values) {
    Expected e{std::move(what), space, begin, std::move(values)};
    if (b.dims.kv_type == uint32_t(KvType::bf16)) {
        for (double& v : e.values) v = bf16_to_f32(f32_to_bf16(float(v)));
        e.extra_rel = kBf16StoreRel;
    }
    return e;
}

}  // namespace mk

// bind_weights and the RoPE table.
#include "runtime/model_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "instructions/registry.hpp"
#include "models/error.hpp"
#include "models/quant.hpp"
#include "scheduler/compile.hpp"
#include "scheduler/tensor_parallel.hpp"

namespace mk {

std::vector<float> rope_inv_freq(const ModelConfig& config) {
    const int64_t half = config.head_dim / 2;
    std::vector<float> out(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        double freq = std::pow(double(config.rope_base), -2.0 * double(i) / double(config.head_dim));
        if (!config.rope_freq_factors.empty()) freq /= config.rope_freq_factors[size_t(i)];
        out[size_t(i)] = float(freq);
    }
    return out;
}

std::vector<bool> weights_read_by(const Schedule& schedule, uint32_t first_stream, uint32_t n_streams) {
    std::vector<bool> used(schedule.weights.size(), false);
    const size_t end = std::min<size_t>(uint64_t(first_stream) + n_streams, schedule.streams.size());
    for (size_t sm = first_stream; sm < end; ++sm)
        for (const Instruction& ins : schedule.streams[sm])
            if (is_valid_opcode(ins.opcode))
                for (uint32_t id : op_info(ins.opcode).weights(ins))
                    if (id < used.size()) used[id] = true;
    return used;
}

namespace {

// A schedule weight: a model tensor, or the slice of one a tensor-parallel rank uses.
struct BoundView {
    const TensorView* tensor = nullptr;  // null: absent
    const uint8_t* data = nullptr;
    WeightFormat format;
};

// Row slices are views into the mapped tensor; a column slice (O- and down-projection of one rank)
// becomes an owned copy of each row's byte range.
// Bound in place of a weight outside bind_only: never read.
constexpr uint8_t kPlaceholder[16] = {};

std::vector<BoundView> bound_views(const Model& model, const Schedule& schedule, const std::vector<bool>* bind_only,
                                   ModelWeights& out) {
    const std::vector<const TensorView*> views = weight_views(model);
    const std::vector<WeightFormat> formats = weight_formats(model);
    std::vector<BoundView> bound;
    if (schedule.tp_size == 1) {
        for (size_t id = 0; id < views.size(); ++id) bound.push_back({views[id], views[id]->data, formats[id]});
        return bound;
    }
    const std::vector<WeightSlice> slices = tp_weight_slices(model_dims(model.config), formats, schedule.tp_size);
    const std::vector<WeightFormat> sliced = tp_weight_formats(formats, model_dims(model.config), schedule.tp_size);
    for (size_t id = 0; id < slices.size(); ++id) {
        const WeightSlice& s = slices[id];
        if (s.source == kNoWeight) {
            bound.push_back({});
            continue;
        }
        const TensorView& t = *views[s.source];
        const WeightFormat& whole = formats[s.source];
        const WeightFormat& f = sliced[id];
        const uint64_t col_byte = row_bytes(t.dtype, s.col_begin);
        if (bind_only && !bind_only->at(id)) {
            bound.push_back({&t, kPlaceholder, f});
            continue;
        }
        if (s.n_cols == whole.cols) {
            bound.push_back({&t, t.data + uint64_t(s.row_begin) * whole.row_bytes, f});
            continue;
        }
        auto& copy = out.padded.emplace_back(uint64_t(f.rows) * f.row_bytes, uint8_t(0));
        for (uint64_t r = 0; r < f.rows; ++r)
            std::memcpy(copy.data() + r * f.row_bytes, t.data + (s.row_begin + r) * whole.row_bytes + col_byte,
                        f.row_bytes);
        bound.push_back({&t, copy.data(), f});
    }
    return bound;
}

}  // namespace

ModelWeights bind_weights(const Model& model, const Schedule& schedule, const std::vector<bool>* bind_only) {
    const std::string source = model.path.string();
    if (schedule.config_hash != model.config.hash())
        fail("{}: the schedule was compiled for another model (config hash {:016x}, this model {:016x})", source,
             schedule.config_hash, model.config.hash());
    ModelWeights out;
    if (bind_only && bind_only->size() != schedule.weights.size())
        fail("{}: bind_only names {} weights, the schedule has {}", source, bind_only->size(), schedule.weights.size());
    const std::vector<BoundView> views = bound_views(model, schedule, bind_only, out);
    if (views.size() != schedule.weights.size())
        fail("{}: the schedule expects {} weights, the model has {}", source, schedule.weights.size(), views.size());

    out.refs.resize(views.size());
    for (size_t id = 0; id < views.size(); ++id) {
        const WeightFormat& want = schedule.weights[id];
        const WeightFormat& have = views[id].format;
        const std::string name = views[id].tensor ? views[id].tensor->name : "(absent)";
        if (want.dtype != have.dtype || want.rows != have.rows || want.cols != have.cols)
            fail("{}: weight {} ({}): the schedule expects {} [{}, {}], the model has {} [{}, {}]", source, id, name,
                 dtype_name(DType(want.dtype)), want.rows, want.cols, dtype_name(DType(have.dtype)), have.rows,
                 have.cols);
        if (!have.present()) continue;
        const DType dtype = DType(have.dtype);
        const uint8_t* data = views[id].data;
        WeightRef& ref = out.refs[id];
        if (bind_only && !(*bind_only)[id]) {
            ref = {kPlaceholder, dtype, have.rows, have.cols, want.row_bytes};
            if (have.rows == 1 && dtype != DType::F32) ref = {kPlaceholder, DType::F32, 1, have.cols, 4ull * have.cols};
            continue;
        }
        ref = {data, dtype, have.rows, have.cols, have.row_bytes};
        if (want.row_bytes != have.row_bytes && have.rows > 1) {
            if (want.row_bytes < have.row_bytes)
                fail("{}: weight {} ({}): the schedule's rows are {} bytes, narrower than the model's {}", source, id,
                     name, want.row_bytes, have.row_bytes);
            auto& copy = out.padded.emplace_back(uint64_t(have.rows) * want.row_bytes, uint8_t(0));
            for (uint64_t r = 0; r < have.rows; ++r)
                std::memcpy(copy.data() + r * want.row_bytes, data + r * have.row_bytes, have.row_bytes);
            ref = {copy.data(), dtype, have.rows, have.cols, want.row_bytes};
        }
        // Vectors (norms, biases) are read as fp32 by every op: convert the rare non-F32 ones once.
        if (have.rows == 1 && dtype != DType::F32) {
            auto& copy = out.converted.emplace_back(have.cols);
            dequantize_row(dtype, data, copy.data(), have.cols);
            ref = {reinterpret_cast<const uint8_t*>(copy.data()), DType::F32, 1, have.cols, 4ull * have.cols};
        }
    }
    out.rope_inv_freq = rope_inv_freq(model.config);
    return out;
}

}  // namespace mk

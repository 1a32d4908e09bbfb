// bind_weights and the RoPE table.
#include "runtime/model_weights.hpp"

#include <cmath>
#include <cstring>

#include "models/error.hpp"
#include "models/quant.hpp"
#include "scheduler/compile.hpp"

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

ModelWeights bind_weights(const Model& model, const Schedule& schedule) {
    const std::string source = model.path.string();
    if (schedule.config_hash != model.config.hash())
        fail("{}: the schedule was compiled for another model (config hash {:016x}, this model {:016x})", source,
             schedule.config_hash, model.config.hash());
    const std::vector<WeightFormat> formats = weight_formats(model);
    if (formats.size() != schedule.weights.size())
        fail("{}: the schedule expects {} weights, the model has {}", source, schedule.weights.size(), formats.size());

    ModelWeights out;
    out.refs.resize(formats.size());
    const std::vector<const TensorView*> views = weight_views(model);
    for (size_t id = 0; id < formats.size(); ++id) {
        const WeightFormat& want = schedule.weights[id];
        const WeightFormat& have = formats[id];
        if (want.dtype != have.dtype || want.rows != have.rows || want.cols != have.cols)
            fail("{}: weight {} ({}): the schedule expects {} [{}, {}], the model has {} [{}, {}]", source, id,
                 views[id]->name, dtype_name(DType(want.dtype)), want.rows, want.cols, dtype_name(DType(have.dtype)),
                 have.rows, have.cols);
        if (!have.present()) continue;
        const TensorView& t = *views[id];
        WeightRef& ref = out.refs[id];
        ref = {t.data, t.dtype, have.rows, have.cols, have.row_bytes};
        if (want.row_bytes != have.row_bytes && have.rows > 1) {
            if (want.row_bytes < have.row_bytes)
                fail("{}: weight {} ({}): the schedule's rows are {} bytes, narrower than the model's {}", source, id,
                     views[id]->name, want.row_bytes, have.row_bytes);
            auto& copy = out.padded.emplace_back(uint64_t(have.rows) * want.row_bytes, uint8_t(0));
            for (uint64_t r = 0; r < have.rows; ++r)
                std::memcpy(copy.data() + r * want.row_bytes, t.data + r * have.row_bytes, have.row_bytes);
            ref = {copy.data(), t.dtype, have.rows, have.cols, want.row_bytes};
        }
        // Vectors (norms, biases) are read as fp32 by every op: convert the rare non-F32 ones once.
        if (have.rows == 1 && t.dtype != DType::F32) {
            auto& copy = out.converted.emplace_back(have.cols);
            dequantize_row(t.dtype, t.data, copy.data(), have.cols);
            ref = {reinterpret_cast<const uint8_t*>(copy.data()), DType::F32, 1, have.cols, 4ull * have.cols};
        }
    }
    out.rope_inv_freq = rope_inv_freq(model.config);
    return out;
}

}  // namespace mk

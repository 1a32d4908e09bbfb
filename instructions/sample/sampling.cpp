// The CPU sampler (see sampling.hpp for the rule).
#include "instructions/sample/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>
#include <vector>

#include "instructions/sample/philox.hpp"

namespace mk {

int32_t argmax(const float* logits, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    return int32_t(best);
}

int32_t sample_token(const float* logits, uint32_t vocab, const SamplingParams& params, const int32_t* history,
                     int32_t n_history, int32_t position) {
    std::vector<float> z(logits, logits + vocab);
    if (params.repeat_penalty != 1.0f && n_history > 0) {
        std::unordered_set<int32_t> seen;
        for (int32_t i = std::max(0, n_history - params.repeat_last_n); i < n_history; ++i) seen.insert(history[i]);
        for (int32_t id : seen) {
            if (id < 0 || uint32_t(id) >= vocab) continue;
            z[id] = z[id] > 0 ? z[id] / params.repeat_penalty : z[id] * params.repeat_penalty;
        }
    }
    if (params.temperature <= 0.0f) return argmax(z.data(), vocab);

    // Candidates by descending logit, ties by ascending id (a total order: identical everywhere).
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    auto before = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    size_t n = vocab;
    if (params.top_k > 0 && uint32_t(params.top_k) < vocab) {
        n = size_t(params.top_k);
        std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), before);
    } else {
        std::sort(ids.begin(), ids.end(), before);
    }
    std::vector<double> p(n);
    const double top = z[ids[0]] / double(params.temperature);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp(z[ids[i]] / double(params.temperature) - top);
    for (double& v : p) v /= sum;
    if (params.min_p > 0.0f) {
        const double floor = params.min_p * p[0];
        while (n > 1 && p[n - 1] < floor) --n;
    }
    if (params.top_p < 1.0f) {
        double cum = 0.0;
        size_t keep = 0;
        while (keep < n && cum < params.top_p) cum += p[keep++];
        n = std::max<size_t>(keep, 1);
    }
    double kept = 0.0;
    for (size_t i = 0; i < n; ++i) kept += p[i];
    const double u = philox_uniform(params.seed, uint64_t(position)) * kept;
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cum += p[i];
        if (u < cum) return ids[i];
    }
    return ids[n - 1];
}

}  // namespace mk

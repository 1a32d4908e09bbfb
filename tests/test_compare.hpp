// How tests compare logits: the relative L2 error ||a - b|| / ||b|| over a whole vector, in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace mk::test {

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
        diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    if (a.size() != b.size()) return INFINITY;  // a length mismatch never passes a tolerance
    return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace mk::test

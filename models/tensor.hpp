// Tensor element types (GGML's ids, as GGUF stores them) and a non-owning view of a stored tensor.
// Shapes are outermost first (an HF weight [out, in] has shape {out, in}); rows are contiguous.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mk {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 8,
    Q4_K = 12,
    Q6_K = 14,
    BF16 = 30,
};

struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // outermost first; shape.back() is the contiguous row length
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;

    int64_t n_elements() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
    int64_t n_rows() const { return shape.empty() ? 0 : n_elements() / shape.back(); }
    int64_t row_length() const { return shape.empty() ? 0 : shape.back(); }
    size_t row_bytes() const { return n_rows() == 0 ? 0 : n_bytes / size_t(n_rows()); }
    const uint8_t* row(int64_t i) const { return data + size_t(i) * row_bytes(); }
};

}  // namespace mk

// GgufWriter: builds a GGUF v3 file (metadata in insertion order, then tensor infos, then data
// aligned to general.alignment, default 32). Bad input (duplicate names, wrong byte counts) throws mk::Error.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "models/gguf.hpp"
#include "models/tensor.hpp"

namespace mk {

class GgufWriter {
public:
    // Scalars and strings; each key may be added once.
    void add_u8(const std::string& key, uint8_t v);
    void add_i8(const std::string& key, int8_t v);
    void add_u16(const std::string& key, uint16_t v);
    void add_i16(const std::string& key, int16_t v);
    void add_u32(const std::string& key, uint32_t v);
    void add_i32(const std::string& key, int32_t v);
    void add_u64(const std::string& key, uint64_t v);
    void add_i64(const std::string& key, int64_t v);
    void add_f32(const std::string& key, float v);
    void add_f64(const std::string& key, double v);
    void add_bool(const std::string& key, bool v);
    void add_string(const std::string& key, const std::string& v);
    // Flat arrays of the common element types.
    void add_strings(const std::string& key, const std::vector<std::string>& v);
    void add_i32s(const std::string& key, std::span<const int32_t> v);
    void add_u32s(const std::string& key, std::span<const uint32_t> v);
    void add_f32s(const std::string& key, std::span<const float> v);
    // Any value, including nested arrays; every element of an array must have its element_type.
    void add(const std::string& key, GgufValue value);

    // A tensor of `shape` (outermost first, at most 4 dims) whose `bytes` are rows in dtype's format.
    void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
    // The same from fp32 values, converted row by row with quantize_row.
    void add_tensor_f32(const std::string& name, DType dtype, std::vector<int64_t> shape, std::span<const float> values);

    // The whole file image, and the same written to a path (throws naming the path on failure).
    std::vector<uint8_t> to_bytes() const;
    void write(const std::filesystem::path& path) const;

    size_t alignment() const;

private:
    struct Tensor {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;  // outermost first
        std::vector<uint8_t> bytes;
    };
    std::vector<std::uint8_t> header_bytes() const;  // everything before the data section, padded
    std::vector<std::pair<std::string, GgufValue>> metadata_;  // insertion order
    std::vector<Tensor> tensors_;
};

}  // namespace mk

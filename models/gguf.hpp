// GGUF reader: parses header, metadata (every value type, nested arrays) and tensor infos from
// (bytes, size), bounds-checking every offset and count. Tensor data is referenced in place.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "models/mapped_file.hpp"
#include "models/tensor.hpp"

namespace mk {

enum class GgufType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// "u32", "string", "array" ...
std::string_view gguf_type_name(GgufType type);
// GGML's name for a tensor type id, including types mk does not read ("Q5_K"); "?" if unknown.
std::string_view ggml_type_name(uint32_t type_id);

struct GgufValue;
struct GgufArray {
    GgufType element_type = GgufType::U8;
    std::vector<GgufValue> values;
};
struct GgufValue {
    GgufType type = GgufType::U8;
    std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

    // Typed accessors; throw mk::Error when the stored type does not convert losslessly.
    uint64_t as_u64() const;
    int64_t as_i64() const;
    double as_f64() const;
    bool as_bool() const;
    const std::string& as_string() const;
    const GgufArray& as_array() const;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<uint64_t> dims;  // GGUF order: dims[0] varies fastest
    DType dtype = DType::F32;
    uint64_t offset = 0;         // relative to the data section
    uint64_t n_bytes = 0;
};

class GgufFile {
public:
    // Parses a GGUF image. `name` prefixes every error ("model.gguf: ..."). The bytes must outlive the result.
    static GgufFile parse(const uint8_t* data, size_t size, const std::string& name);
    // Maps and parses a file; the mapping is kept alive by the returned object.
    static GgufFile open(const std::filesystem::path& path);

    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    const std::string& name() const { return name_; }
    const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

    const GgufValue* find(const std::string& key) const;
    const GgufValue& get(const std::string& key) const;  // throws naming the missing key
    // Convenience getters with defaults for optional keys.
    uint64_t get_u64(const std::string& key, std::optional<uint64_t> fallback = std::nullopt) const;
    double get_f64(const std::string& key, std::optional<double> fallback = std::nullopt) const;
    std::string get_string(const std::string& key, std::optional<std::string> fallback = std::nullopt) const;
    bool get_bool(const std::string& key, std::optional<bool> fallback = std::nullopt) const;

    const GgufTensorInfo* find_tensor(const std::string& name) const;
    // A view of the tensor's bytes with shape outermost first (GGUF dims reversed); throws if missing.
    TensorView tensor(const std::string& name) const;

    const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

private:
    std::string name_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    std::map<std::string, GgufValue> metadata_;
    std::vector<GgufTensorInfo> tensors_;
    const uint8_t* data_section_ = nullptr;
    std::shared_ptr<const MappedFile> mapping_;
};

}  // namespace mk

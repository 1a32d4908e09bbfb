// Hugging Face safetensors: a bounds-checked, memory-mapped reader for one file or a sharded set
// (model.safetensors.index.json), and a streaming writer (header padded so the data is 64-byte aligned).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/mapped_file.hpp"
#include "models/tensor.hpp"

namespace mk {

struct SafetensorsTensorInfo {
    std::string name;
    std::string dtype_name;        // as stored: "BF16", "F32", "I64", ...
    std::optional<DType> dtype;    // F32 / F16 / BF16; empty for dtypes mk cannot use
    std::vector<int64_t> shape;    // outermost first
    uint64_t begin = 0, end = 0;   // byte offsets relative to the data section
};

class SafetensorsFile {
public:
    // Parses an image; `name` prefixes every error. The bytes must outlive the result.
    static SafetensorsFile parse(const uint8_t* data, size_t size, const std::string& name);
    // Maps and parses a file; errors are prefixed with its file name.
    static SafetensorsFile open(const std::filesystem::path& path);

    const std::string& name() const { return name_; }
    const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
    const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
    // A view of the tensor's bytes; throws naming the file and tensor if it is missing or of an unsupported dtype.
    TensorView tensor(const std::string& name) const;
    const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

private:
    std::string name_;
    std::vector<SafetensorsTensorInfo> tensors_;
    std::map<std::string, size_t> index_;  // tensor name -> position in tensors_
    std::map<std::string, std::string> metadata_;
    const uint8_t* data_section_ = nullptr;
    std::shared_ptr<const MappedFile> mapping_;
};

// The weights of an HF model directory: model.safetensors, or the shards named by
// model.safetensors.index.json's weight_map (each shard mapped once).
class SafetensorsModel {
public:
    static SafetensorsModel open(const std::filesystem::path& dir);

    const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
    TensorView tensor(const std::string& name) const;  // throws naming the shard and tensor
    const SafetensorsFile& file_of(const std::string& name) const;  // the shard holding a tensor
    std::vector<std::string> tensor_names() const;
    const std::vector<SafetensorsFile>& files() const { return files_; }

private:
    std::vector<SafetensorsFile> files_;
    std::map<std::string, size_t> shard_of_;  // tensor name -> index in files_
};

// Writes one safetensors file: declare every tensor, then write() streams the header and asks
// `fill` for each tensor's bytes in declaration order (dst is sized exactly).
class SafetensorsWriter {
public:
    void add(const std::string& name, DType dtype, std::vector<int64_t> shape);
    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
    void write(const std::filesystem::path& path, const std::function<void(size_t index, std::span<uint8_t> dst)>& fill) const;

private:
    struct Entry {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        uint64_t n_bytes;
    };
    std::vector<Entry> entries_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace mk

// A read-only memory-mapped file. Tensors stay in the file's own format and are used in place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

namespace mk {

class MappedFile {
public:
    // Maps the whole file; throws mk::Error naming the path when it cannot be opened or mapped.
    static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::filesystem::path& path() const { return path_; }

private:
    MappedFile() = default;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::filesystem::path path_;
};

}  // namespace mk

// MappedFile: a read-only, private mmap of a whole file. An empty file is a valid, empty mapping
// (mmap refuses length 0, so none is made).
#include "models/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "models/error.hpp"

namespace mk {

namespace {

// Closes the descriptor on every path out of open(); the mapping does not need it.
struct FdGuard {
    int fd;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
    FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) fail("{}: cannot stat: {}", path.string(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path.string());

    std::shared_ptr<MappedFile> file(new MappedFile());
    file->path_ = path;
    file->size_ = size_t(st.st_size);
    if (file->size_ == 0) return file;
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail("{}: cannot map {} bytes: {}", path.string(), file->size_, std::strerror(errno));
    file->data_ = static_cast<const uint8_t*>(p);
    return file;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace mk

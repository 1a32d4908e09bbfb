// GGUF parser (versions 2 and 3). Every read is bounds-checked, and every count is checked against
// the bytes left before anything is allocated for it; errors name the file and the key or tensor.
#include "models/gguf.hpp"

#include <bit>
#include <cstring>
#include <unordered_set>

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;               // empty key, value type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one dim, type, offset

// Reads little-endian fields from (data, size); failures carry "file: where: ".
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }
    void set_where(std::string where) { where_ = std::move(where); }

    template <typename... Args>
    [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
        std::string message = fmt::format(format, std::forward<Args>(args)...);
        if (where_.empty()) fail("{}: {}", file_, message);
        fail("{}: {}: {}", file_, where_, message);
    }

    void need(uint64_t n, std::string_view what) const {
        if (n > left())
            error("truncated: the {} needs {} bytes at offset {}, but the file has {} bytes", what, n, pos_, size_);
    }

    template <typename T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T value;
        std::memcpy(&value, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return value;
    }

    std::string read_string(std::string_view what) {
        auto n = read<uint64_t>(what);
        if (n > left()) error("{} length {} exceeds the {} bytes left in the file", what, n, left());
        std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
        pos_ += size_t(n);
        return s;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& file_;
    std::string where_;
};

// The fewest bytes one value of this type can take, used to bound counts before allocating.
uint64_t min_value_bytes(GgufType type) {
    switch (type) {
        case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
        case GgufType::U16: case GgufType::I16: return 2;
        case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
        case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
        case GgufType::ARRAY: return 4 + 8;
    }
    return 1;
}

GgufType read_type(Cursor& in, std::string_view what) {
    auto id = in.read<uint32_t>(what);
    if (id > uint32_t(GgufType::F64)) in.error("unknown {} {}", what, id);
    return GgufType(id);
}

GgufValue read_value(Cursor& in, GgufType type, int depth);

GgufArray read_array(Cursor& in, int depth) {
    if (depth > kMaxArrayDepth) in.error("arrays nested more than {} deep", kMaxArrayDepth);
    GgufArray array;
    array.element_type = read_type(in, "array element type");
    auto count = in.read<uint64_t>("array length");
    uint64_t min_bytes = min_value_bytes(array.element_type);
    if (count > in.left() / min_bytes)
        in.error("array of {} {} values cannot fit in the {} bytes left in the file", count,
                 gguf_type_name(array.element_type), in.left());
    array.values.reserve(size_t(count));
    for (uint64_t i = 0; i < count; ++i) array.values.push_back(read_value(in, array.element_type, depth));
    return array;
}

GgufValue read_value(Cursor& in, GgufType type, int depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
        case GgufType::U8: v.value = uint64_t(in.read<uint8_t>("u8 value")); break;
        case GgufType::I8: v.value = int64_t(in.read<int8_t>("i8 value")); break;
        case GgufType::U16: v.value = uint64_t(in.read<uint16_t>("u16 value")); break;
        case GgufType::I16: v.value = int64_t(in.read<int16_t>("i16 value")); break;
        case GgufType::U32: v.value = uint64_t(in.read<uint32_t>("u32 value")); break;
        case GgufType::I32: v.value = int64_t(in.read<int32_t>("i32 value")); break;
        case GgufType::U64: v.value = in.read<uint64_t>("u64 value"); break;
        case GgufType::I64: v.value = in.read<int64_t>("i64 value"); break;
        case GgufType::F32: v.value = double(in.read<float>("f32 value")); break;
        case GgufType::F64: v.value = in.read<double>("f64 value"); break;
        case GgufType::BOOL: {
            auto b = in.read<uint8_t>("bool value");
            if (b > 1) in.error("bool value {} is neither 0 nor 1", b);
            v.value = b == 1;
            break;
        }
        case GgufType::STRING: v.value = in.read_string("string value"); break;
        case GgufType::ARRAY: v.value = read_array(in, depth + 1); break;
    }
    return v;
}

size_t read_alignment(const GgufFile& file, const std::string& name) {
    const GgufValue* v = file.find("general.alignment");
    if (!v) return 32;
    uint64_t a = with_context(name + ": key general.alignment", [&] { return v->as_u64(); });
    if (a == 0 || !std::has_single_bit(a) || a > (uint64_t(1) << 30))
        fail("{}: key general.alignment: {} is not a power of two up to 2^30", name, a);
    return size_t(a);
}

// Reads one tensor info; the dims, type and offset are checked here, the data range by the caller.
GgufTensorInfo read_tensor_info(Cursor& in, size_t alignment) {
    GgufTensorInfo t;
    t.name = in.read_string("tensor name");
    in.set_where("tensor " + t.name);
    auto n_dims = in.read<uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) in.error("n_dims {} is not in [1, {}]", n_dims, kMaxDims);
    for (uint32_t i = 0; i < n_dims; ++i) {
        t.dims.push_back(in.read<uint64_t>("dimension"));
        if (t.dims.back() == 0 || t.dims.back() > uint64_t(INT64_MAX)) in.error("dimension {} is {}", i, t.dims.back());
    }
    auto type_id = in.read<uint32_t>("tensor type");
    if (!is_supported_dtype(type_id)) in.error("unsupported tensor type {} (ggml type id {})", ggml_type_name(type_id), type_id);
    t.dtype = DType(type_id);
    const DTypeTraits& traits = dtype_traits(t.dtype);
    if (t.dims[0] % uint64_t(traits.block_values) != 0)
        in.error("row length {} is not a multiple of the {} block size {}", t.dims[0], traits.name, traits.block_values);
    t.n_bytes = t.dims[0] / uint64_t(traits.block_values) * uint64_t(traits.block_bytes);
    for (uint32_t i = 1; i < n_dims; ++i)
        if (__builtin_mul_overflow(t.n_bytes, t.dims[i], &t.n_bytes)) in.error("size in bytes overflows 64 bits");
    t.offset = in.read<uint64_t>("data offset");
    if (t.offset % alignment != 0) in.error("data offset {} is not a multiple of the alignment {}", t.offset, alignment);
    return t;
}

}  // namespace

GgufFile GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    Cursor in(data, size, name);
    GgufFile file;
    file.name_ = name;

    in.need(4, "GGUF magic");
    if (std::memcmp(data, "GGUF", 4) != 0)
        fail("{}: not a GGUF file: it starts with bytes {:02x} {:02x} {:02x} {:02x}, not 'GGUF'", name, data[0], data[1],
             data[2], data[3]);
    in.read<uint32_t>("GGUF magic");
    file.version_ = in.read<uint32_t>("version");
    if (file.version_ != 2 && file.version_ != 3) {
        uint32_t swapped = __builtin_bswap32(file.version_);
        if (swapped == 2 || swapped == 3) fail("{}: big-endian GGUF files are not supported", name);
        fail("{}: unsupported GGUF version {} (mk reads versions 2 and 3)", name, file.version_);
    }
    auto n_tensors = in.read<uint64_t>("tensor count");
    auto n_kv = in.read<uint64_t>("metadata count");
    if (n_tensors > in.left() / kMinTensorInfoBytes)
        fail("{}: tensor count {} cannot fit in the {} bytes left in the file", name, n_tensors, in.left());
    if (n_kv > in.left() / kMinKvBytes)
        fail("{}: metadata count {} cannot fit in the {} bytes left in the file", name, n_kv, in.left());

    for (uint64_t i = 0; i < n_kv; ++i) {
        in.set_where(fmt::format("metadata entry {}", i));
        std::string key = in.read_string("key");
        in.set_where("key " + key);
        GgufType type = read_type(in, "value type");
        GgufValue value = read_value(in, type, 0);
        if (!file.metadata_.emplace(key, std::move(value)).second) in.error("duplicate key");
    }
    file.alignment_ = read_alignment(file, name);

    std::unordered_set<std::string> seen;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        in.set_where(fmt::format("tensor info {}", i));
        GgufTensorInfo t = read_tensor_info(in, file.alignment_);
        if (!seen.insert(t.name).second) in.error("duplicate tensor name");
        file.tensors_.push_back(std::move(t));
    }

    uint64_t data_start = (uint64_t(in.pos()) + file.alignment_ - 1) / file.alignment_ * file.alignment_;
    for (const GgufTensorInfo& t : file.tensors_) {
        uint64_t begin = 0, end = 0;
        if (__builtin_add_overflow(data_start, t.offset, &begin) || __builtin_add_overflow(begin, t.n_bytes, &end))
            fail("{}: tensor {}: data offset {} + {} bytes overflows 64 bits", name, t.name, t.offset, t.n_bytes);
        if (end > size)
            fail("{}: tensor {}: data [{}, {}) lies past the end of the file ({} bytes)", name, t.name, begin, end, size);
    }
    file.data_section_ = data_start <= size ? data + data_start : nullptr;
    return file;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
    auto mapping = MappedFile::open(path);
    GgufFile file = parse(mapping->data(), mapping->size(), path.string());
    file.mapping_ = std::move(mapping);
    return file;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    for (const GgufTensorInfo& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

TensorView GgufFile::tensor(const std::string& name) const {
    const GgufTensorInfo* t = find_tensor(name);
    if (!t) fail("{}: tensor {}: not found", name_, name);
    TensorView view;
    view.name = t->name;
    view.dtype = t->dtype;
    for (auto it = t->dims.rbegin(); it != t->dims.rend(); ++it) view.shape.push_back(int64_t(*it));
    view.data = data_section_ + t->offset;
    view.n_bytes = size_t(t->n_bytes);
    return view;
}

}  // namespace mk

// GgufWriter: serializes metadata and tensors as GGUF v3, little-endian. The file is written to
// "<path>.tmp" and renamed, so a reader never sees a half-written model.
#include "models/gguf_writer.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <unistd.h>

#include <fmt/ranges.h>

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

namespace {

struct Buffer {
    std::vector<uint8_t> bytes;

    template <typename T>
    void put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    void pad_to(size_t alignment) { bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0); }
};

// A stored integer narrowed to the width its type declares; out of range is the caller's bug in the value.
template <typename T>
T narrow(const GgufValue& v) {
    if constexpr (std::is_signed_v<T>) {
        int64_t i = v.as_i64();
        if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max())
            fail("value {} does not fit in {}", i, gguf_type_name(v.type));
        return T(i);
    } else {
        uint64_t u = v.as_u64();
        if (u > std::numeric_limits<T>::max()) fail("value {} does not fit in {}", u, gguf_type_name(v.type));
        return T(u);
    }
}

void put_value(Buffer& out, const GgufValue& v) {
    switch (v.type) {
        case GgufType::U8: out.put(narrow<uint8_t>(v)); return;
        case GgufType::I8: out.put(narrow<int8_t>(v)); return;
        case GgufType::U16: out.put(narrow<uint16_t>(v)); return;
        case GgufType::I16: out.put(narrow<int16_t>(v)); return;
        case GgufType::U32: out.put(narrow<uint32_t>(v)); return;
        case GgufType::I32: out.put(narrow<int32_t>(v)); return;
        case GgufType::U64: out.put(v.as_u64()); return;
        case GgufType::I64: out.put(v.as_i64()); return;
        case GgufType::F32: out.put(float(v.as_f64())); return;
        case GgufType::F64: out.put(v.as_f64()); return;
        case GgufType::BOOL: out.put(uint8_t(v.as_bool())); return;
        case GgufType::STRING: out.put_string(v.as_string()); return;
        case GgufType::ARRAY: {
            const GgufArray& a = v.as_array();
            out.put(uint32_t(a.element_type));
            out.put(uint64_t(a.values.size()));
            for (size_t i = 0; i < a.values.size(); ++i) {
                if (a.values[i].type != a.element_type)
                    fail("array element {} is {}, not {}", i, gguf_type_name(a.values[i].type),
                         gguf_type_name(a.element_type));
                put_value(out, a.values[i]);
            }
            return;
        }
    }
    fail("unknown value type {}", uint32_t(v.type));
}

GgufValue make(GgufType type, auto v) {
    GgufValue value;
    value.type = type;
    value.value = v;
    return value;
}

template <typename T>
GgufValue make_array(GgufType element_type, std::span<const T> v) {
    GgufArray array;
    array.element_type = element_type;
    array.values.reserve(v.size());
    for (const T& x : v) {
        if constexpr (std::is_floating_point_v<T>) array.values.push_back(make(element_type, double(x)));
        else if constexpr (std::is_signed_v<T>) array.values.push_back(make(element_type, int64_t(x)));
        else array.values.push_back(make(element_type, uint64_t(x)));
    }
    return make(GgufType::ARRAY, std::move(array));
}

}  // namespace

void GgufWriter::add(const std::string& key, GgufValue value) {
    for (const auto& [k, v] : metadata_)
        if (k == key) fail("gguf writer: key {}: added twice", key);
    metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_u8(const std::string& key, uint8_t v) { add(key, make(GgufType::U8, uint64_t(v))); }
void GgufWriter::add_i8(const std::string& key, int8_t v) { add(key, make(GgufType::I8, int64_t(v))); }
void GgufWriter::add_u16(const std::string& key, uint16_t v) { add(key, make(GgufType::U16, uint64_t(v))); }
void GgufWriter::add_i16(const std::string& key, int16_t v) { add(key, make(GgufType::I16, int64_t(v))); }
void GgufWriter::add_u32(const std::string& key, uint32_t v) { add(key, make(GgufType::U32, uint64_t(v))); }
void GgufWriter::add_i32(const std::string& key, int32_t v) { add(key, make(GgufType::I32, int64_t(v))); }
void GgufWriter::add_u64(const std::string& key, uint64_t v) { add(key, make(GgufType::U64, v)); }
void GgufWriter::add_i64(const std::string& key, int64_t v) { add(key, make(GgufType::I64, v)); }
void GgufWriter::add_f32(const std::string& key, float v) { add(key, make(GgufType::F32, double(v))); }
void GgufWriter::add_f64(const std::string& key, double v) { add(key, make(GgufType::F64, v)); }
void GgufWriter::add_bool(const std::string& key, bool v) { add(key, make(GgufType::BOOL, v)); }
void GgufWriter::add_string(const std::string& key, const std::string& v) { add(key, make(GgufType::STRING, v)); }

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& v) {
    GgufArray array;
    array.element_type = GgufType::STRING;
    array.values.reserve(v.size());
    for (const std::string& s : v) array.values.push_back(make(GgufType::STRING, s));
    add(key, make(GgufType::ARRAY, std::move(array)));
}
void GgufWriter::add_i32s(const std::string& key, std::span<const int32_t> v) { add(key, make_array(GgufType::I32, v)); }
void GgufWriter::add_u32s(const std::string& key, std::span<const uint32_t> v) { add(key, make_array(GgufType::U32, v)); }
void GgufWriter::add_f32s(const std::string& key, std::span<const float> v) { add(key, make_array(GgufType::F32, v)); }

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
    for (const Tensor& t : tensors_)
        if (t.name == name) fail("gguf writer: tensor {}: added twice", name);
    if (shape.empty() || shape.size() > 4) fail("gguf writer: tensor {}: {} dims, not 1 to 4", name, shape.size());
    size_t n_rows = 1;
    for (int64_t d : shape) {
        if (d <= 0) fail("gguf writer: tensor {}: dimension {} is not positive", name, d);
        n_rows *= size_t(d);
    }
    n_rows /= size_t(shape.back());
    size_t expected = with_context("gguf writer: tensor " + name, [&] { return row_bytes(dtype, shape.back()) * n_rows; });
    if (bytes.size() != expected)
        fail("gguf writer: tensor {}: {} bytes given, {} {} needs {}", name, bytes.size(), dtype_name(dtype),
             fmt::join(shape, "x"), expected);
    tensors_.push_back({name, dtype, std::move(shape), std::move(bytes)});
}

void GgufWriter::add_tensor_f32(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                std::span<const float> values) {
    if (shape.empty() || shape.back() <= 0) fail("gguf writer: tensor {}: bad shape", name);
    int64_t row = shape.back();
    if (values.size() % size_t(row) != 0) fail("gguf writer: tensor {}: {} values are not whole rows", name, values.size());
    size_t n_rows = values.size() / size_t(row);
    size_t stride = with_context("gguf writer: tensor " + name, [&] { return row_bytes(dtype, row); });
    std::vector<uint8_t> bytes(n_rows * stride);
    for (size_t r = 0; r < n_rows; ++r) quantize_row(dtype, values.data() + r * size_t(row), bytes.data() + r * stride, row);
    add_tensor(name, dtype, std::move(shape), std::move(bytes));
}

size_t GgufWriter::alignment() const {
    for (const auto& [k, v] : metadata_) {
        if (k != "general.alignment") continue;
        uint64_t a = with_context("gguf writer: key general.alignment", [&v = v] { return v.as_u64(); });
        if (a == 0 || !std::has_single_bit(a) || a > (uint64_t(1) << 30))
            fail("gguf writer: key general.alignment: {} is not a power of two up to 2^30", a);
        return size_t(a);
    }
    return 32;
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
    size_t align = alignment();
    Buffer out;
    out.bytes.insert(out.bytes.end(), {'G', 'G', 'U', 'F'});
    out.put(uint32_t(3));
    out.put(uint64_t(tensors_.size()));
    out.put(uint64_t(metadata_.size()));
    for (const auto& [key, value] : metadata_) {
        out.put_string(key);
        out.put(uint32_t(value.type));
        with_context("gguf writer: key " + key, [&, &value = value] { put_value(out, value); });
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        out.put_string(t.name);
        out.put(uint32_t(t.shape.size()));
        for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) out.put(uint64_t(*it));  // innermost first
        out.put(uint32_t(t.dtype));
        out.put(offset);
        offset += (t.bytes.size() + align - 1) / align * align;
    }
    out.pad_to(align);
    return std::move(out.bytes);
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    size_t align = alignment();
    std::vector<uint8_t> bytes = header_bytes();
    for (const Tensor& t : tensors_) {
        bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
        bytes.resize((bytes.size() + align - 1) / align * align, 0);
    }
    return bytes;
}

void GgufWriter::write(const std::filesystem::path& path) const {
    size_t align = alignment();
    std::vector<uint8_t> header = header_bytes();
    // A sibling named by the process, renamed over the file: a reader never sees half a file, and two processes
    // writing the same file at once (tests in parallel) each rename a whole one.
    std::filesystem::path tmp = path;
    tmp += fmt::format(".tmp.{}", getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail("{}: cannot create: {}", tmp.string(), std::strerror(errno));
        const std::vector<char> zeros(align, 0);
        out.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size()));
        for (const Tensor& t : tensors_) {
            out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
            out.write(zeros.data(), std::streamsize((align - t.bytes.size() % align) % align));
        }
        out.flush();
        if (!out) fail("{}: cannot write: {}", tmp.string(), std::strerror(errno));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail("{}: cannot rename {} to it: {}", path.string(), tmp.string(), ec.message());
}

}  // namespace mk

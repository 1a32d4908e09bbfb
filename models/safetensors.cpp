// safetensors reader and writer. Layout: u64 little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the data section.
#include "models/safetensors.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/error.hpp"
#include "models/quant.hpp"

namespace mk {

namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; real ones are a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kDataAlignment = 64;

struct StDType {
    const char* name;
    int element_bytes;
    std::optional<DType> dtype;
};
constexpr StDType kDTypes[] = {
    {"F32", 4, DType::F32},  {"F16", 2, DType::F16},     {"BF16", 2, DType::BF16}, {"F64", 8, {}},
    {"I64", 8, {}},          {"I32", 4, {}},             {"I16", 2, {}},           {"I8", 1, {}},
    {"U64", 8, {}},          {"U32", 4, {}},             {"U16", 2, {}},           {"U8", 1, {}},
    {"BOOL", 1, {}},         {"F8_E4M3", 1, {}},         {"F8_E5M2", 1, {}},
};

const StDType* find_dtype(const std::string& name) {
    for (const StDType& d : kDTypes)
        if (name == d.name) return &d;
    return nullptr;
}

const char* st_dtype_name(DType dtype) {
    for (const StDType& d : kDTypes)
        if (d.dtype == dtype) return d.name;
    fail("safetensors cannot store {} (only F32, F16, BF16)", dtype_name(dtype));
}

SafetensorsTensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_size) {
    auto bad = [&](const std::string& what) { fail("tensor {}: {}", name, what); };
    if (!e.is_object()) bad("entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) bad("missing dtype");
    if (sh == e.end() || !sh->is_array()) bad("missing shape");
    if (off == e.end() || !off->is_array() || off->size() != 2) bad("missing data_offsets [begin, end]");

    SafetensorsTensorInfo t;
    t.name = name;
    t.dtype_name = dt->get<std::string>();
    const StDType* d = find_dtype(t.dtype_name);
    if (!d) bad("unknown dtype '" + t.dtype_name + "'");
    t.dtype = d->dtype;

    uint64_t n_elements = 1;
    for (const json& dim : *sh) {
        if (!dim.is_number_unsigned()) bad("shape " + sh->dump() + " has a non-integer or negative dimension");
        uint64_t v = dim.get<uint64_t>();
        if (v > (uint64_t(1) << 40) || (v && n_elements > (uint64_t(1) << 40) / v)) bad("shape " + sh->dump() + " is absurd");
        n_elements *= v;
        t.shape.push_back(int64_t(v));
    }
    if (t.shape.size() > 8) bad("shape " + sh->dump() + " has too many dimensions");
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) bad("data_offsets are not integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
        bad(fmt::format("data_offsets [{}, {}] lie outside the {}-byte data section", t.begin, t.end, data_size));
    uint64_t want = n_elements * uint64_t(d->element_bytes);
    if (t.end - t.begin != want)
        bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", t.begin, t.end,
                        t.end - t.begin, sh->dump(), t.dtype_name, want));
    return t;
}

}  // namespace

SafetensorsFile SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    return with_context(name, [&] {
        if (size < 8) fail("truncated: {} bytes, too short for the header length", size);
        uint64_t header_bytes = 0;
        for (int i = 0; i < 8; ++i) header_bytes |= uint64_t(data[i]) << (8 * i);
        if (header_bytes > kMaxHeaderBytes) fail("header length {} is absurd (limit {})", header_bytes, kMaxHeaderBytes);
        if (header_bytes > size - 8) fail("truncated header: it declares {} bytes, the file holds {}", header_bytes, size - 8);

        const char* text = reinterpret_cast<const char*>(data + 8);
        json header = json::parse(text, text + header_bytes, nullptr, false);
        if (header.is_discarded() || !header.is_object()) fail("header is not a JSON object");

        SafetensorsFile file;
        file.name_ = name;
        file.data_section_ = data + 8 + header_bytes;
        const uint64_t data_size = size - 8 - header_bytes;
        for (auto it = header.begin(); it != header.end(); ++it) {
            if (it.key() == "__metadata__") {
                if (!it->is_object()) fail("__metadata__ is not an object");
                for (auto m = it->begin(); m != it->end(); ++m) {
                    if (!m->is_string()) fail("__metadata__.{}: not a string", m.key());
                    file.metadata_[m.key()] = m->get<std::string>();
                }
                continue;
            }
            file.index_[it.key()] = file.tensors_.size();
            file.tensors_.push_back(parse_entry(it.key(), *it, data_size));
        }
        return file;
    });
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    auto mapping = MappedFile::open(path);
    SafetensorsFile file = parse(mapping->data(), mapping->size(), path.filename().string());
    file.mapping_ = std::move(mapping);
    return file;
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::tensor(const std::string& name) const {
    const SafetensorsTensorInfo* t = find_tensor(name);
    if (!t) fail("{}: tensor {}: missing", name_, name);
    if (!t->dtype) fail("{}: tensor {}: unsupported dtype {} (mk reads F32, F16, BF16)", name_, name, t->dtype_name);
    TensorView v;
    v.name = name;
    v.dtype = *t->dtype;
    v.shape = t->shape;
    v.data = data_section_ + t->begin;
    v.n_bytes = size_t(t->end - t->begin);
    return v;
}

SafetensorsModel SafetensorsModel::open(const std::filesystem::path& dir) {
    SafetensorsModel model;
    const auto index_path = dir / "model.safetensors.index.json";
    if (!std::filesystem::exists(index_path)) {
        if (!std::filesystem::exists(dir / "model.safetensors"))
            fail("{}: neither model.safetensors nor model.safetensors.index.json is present", dir.string());
        model.files_.push_back(SafetensorsFile::open(dir / "model.safetensors"));
        for (const auto& t : model.files_[0].tensors()) model.shard_of_[t.name] = 0;
        return model;
    }

    const std::string source = index_path.filename().string();
    std::ifstream in(index_path, std::ios::binary);
    if (!in) fail("{}: cannot open", index_path.string());
    std::ostringstream text;
    text << in.rdbuf();
    json index = json::parse(text.str(), nullptr, false);
    if (index.is_discarded() || !index.is_object()) fail("{}: not a JSON object", source);
    auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object()) fail("{}: missing key weight_map", source);

    std::map<std::string, size_t> shard_index;  // shard file name -> index in files_
    for (auto it = map->begin(); it != map->end(); ++it) {
        if (!it->is_string()) fail("{}: weight_map.{}: not a file name", source, it.key());
        std::string shard = it->get<std::string>();
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
            fail("{}: weight_map.{}: '{}' is not a plain file name", source, it.key(), shard);
        auto [pos, added] = shard_index.emplace(shard, model.files_.size());
        if (added) model.files_.push_back(SafetensorsFile::open(dir / shard));
        if (!model.files_[pos->second].find_tensor(it.key()))
            fail("{}: weight_map.{}: tensor is not in {}", source, it.key(), shard);
        model.shard_of_[it.key()] = pos->second;
    }
    return model;
}

const SafetensorsTensorInfo* SafetensorsModel::find_tensor(const std::string& name) const {
    auto it = shard_of_.find(name);
    return it == shard_of_.end() ? nullptr : files_[it->second].find_tensor(name);
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
    auto it = shard_of_.find(name);
    if (it == shard_of_.end()) {
        if (files_.size() == 1) fail("{}: tensor {}: missing", files_[0].name(), name);
        fail("model.safetensors.index.json: tensor {}: missing", name);
    }
    return files_[it->second];
}

TensorView SafetensorsModel::tensor(const std::string& name) const { return file_of(name).tensor(name); }

std::vector<std::string> SafetensorsModel::tensor_names() const {
    std::vector<std::string> names;
    for (const auto& [name, shard] : shard_of_) names.push_back(name);
    return names;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
    st_dtype_name(dtype);  // throws for block formats
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) fail("safetensors writer: tensor {}: negative dimension", name);
        n *= uint64_t(d);
    }
    entries_.push_back({name, dtype, std::move(shape), n * uint64_t(dtype_traits(dtype).block_bytes)});
}

void SafetensorsWriter::write(const std::filesystem::path& path,
                              const std::function<void(size_t, std::span<uint8_t>)>& fill) const {
    json header = json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    uint64_t offset = 0;
    for (const Entry& e : entries_) {
        header[e.name] = {{"dtype", st_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.n_bytes}}};
        offset += e.n_bytes;
    }
    std::string text = header.dump();
    text.append((kDataAlignment - (8 + text.size()) % kDataAlignment) % kDataAlignment, ' ');

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot create", path.string());
    uint8_t length[8];  // u64 little-endian header length
    for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), std::streamsize(text.size()));
    std::vector<uint8_t> buffer;  // (n_bytes) one tensor's bytes, as stored
    for (size_t i = 0; i < entries_.size(); ++i) {
        buffer.assign(entries_[i].n_bytes, 0);
        fill(i, buffer);
        out.write(reinterpret_cast<const char*>(buffer.data()), std::streamsize(buffer.size()));
    }
    out.flush();
    if (!out) fail("{}: write failed", path.string());
}

}  // namespace mk

// GGUF metadata access: typed conversions of stored values (lossless only) and the keyed getters,
// whose errors name the file and the key.
#include <array>
#include <cmath>
#include <limits>

#include "models/error.hpp"
#include "models/gguf.hpp"

namespace mk {

std::string_view gguf_type_name(GgufType type) {
    static constexpr std::array<std::string_view, 13> kNames = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    auto id = uint32_t(type);
    return id < kNames.size() ? kNames[id] : "?";
}

std::string_view ggml_type_name(uint32_t type_id) {
    // GGML's type ids 0-30 (4 and 5 were retired formats).
    static constexpr std::array<std::string_view, 31> kNames = {
        "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2", "Q4_3",   "Q5_0",  "Q5_1",  "Q8_0",  "Q8_1", "Q2_K",
        "Q3_K",    "Q4_K",   "Q5_K",    "Q6_K",  "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
        "IQ3_S",   "IQ2_S",  "IQ4_XS",  "I8",    "I16",  "I32",    "I64",   "F64",   "IQ1_M", "BF16"};
    return type_id < kNames.size() ? kNames[type_id] : "?";
}

namespace {

[[noreturn]] void wrong_type(const GgufValue& v, std::string_view wanted) {
    fail("expected {}, got {}", wanted, gguf_type_name(v.type));
}

}  // namespace

uint64_t GgufValue::as_u64() const {
    if (auto u = std::get_if<uint64_t>(&value)) return *u;
    if (auto i = std::get_if<int64_t>(&value)) {
        if (*i < 0) fail("expected an unsigned integer, got {} {}", gguf_type_name(type), *i);
        return uint64_t(*i);
    }
    wrong_type(*this, "an unsigned integer");
}

int64_t GgufValue::as_i64() const {
    if (auto i = std::get_if<int64_t>(&value)) return *i;
    if (auto u = std::get_if<uint64_t>(&value)) {
        if (*u > uint64_t(std::numeric_limits<int64_t>::max()))
            fail("expected a signed integer, got {} {} (too large)", gguf_type_name(type), *u);
        return int64_t(*u);
    }
    wrong_type(*this, "a signed integer");
}

double GgufValue::as_f64() const {
    if (auto d = std::get_if<double>(&value)) return *d;
    // Integers convert when a double holds them exactly (|v| <= 2^53).
    constexpr uint64_t kExact = uint64_t(1) << 53;
    if (auto u = std::get_if<uint64_t>(&value); u && *u <= kExact) return double(*u);
    if (auto i = std::get_if<int64_t>(&value); i && *i <= int64_t(kExact) && *i >= -int64_t(kExact)) return double(*i);
    wrong_type(*this, "a number a double holds exactly");
}

bool GgufValue::as_bool() const {
    if (auto b = std::get_if<bool>(&value)) return *b;
    wrong_type(*this, "bool");
}

const std::string& GgufValue::as_string() const {
    if (auto s = std::get_if<std::string>(&value)) return *s;
    wrong_type(*this, "string");
}

const GgufArray& GgufValue::as_array() const {
    if (auto a = std::get_if<GgufArray>(&value)) return *a;
    wrong_type(*this, "array");
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) fail("{}: missing key {}", name_, key);
    return *v;
}

namespace {

// Missing key: the fallback if given, else an error; present: the conversion, with the key as context.
template <typename T, typename Convert>
T get_or(const GgufFile& file, const std::string& key, const std::optional<T>& fallback, Convert convert) {
    const GgufValue* v = file.find(key);
    if (!v && fallback) return *fallback;
    const GgufValue& value = file.get(key);
    return with_context(file.name() + ": key " + key, [&] { return T(convert(value)); });
}

}  // namespace

uint64_t GgufFile::get_u64(const std::string& key, std::optional<uint64_t> fallback) const {
    return get_or<uint64_t>(*this, key, fallback, [](const GgufValue& v) { return v.as_u64(); });
}

double GgufFile::get_f64(const std::string& key, std::optional<double> fallback) const {
    return get_or<double>(*this, key, fallback, [](const GgufValue& v) { return v.as_f64(); });
}

std::string GgufFile::get_string(const std::string& key, std::optional<std::string> fallback) const {
    return get_or<std::string>(*this, key, fallback, [](const GgufValue& v) { return v.as_string(); });
}

bool GgufFile::get_bool(const std::string& key, std::optional<bool> fallback) const {
    return get_or<bool>(*this, key, fallback, [](const GgufValue& v) { return v.as_bool(); });
}

}  // namespace mk

// The "synthetic:SHAPE:DTYPE[:key=value]..." spec string: parsing (every error names the spec and the
// bad part) and the canonical form that parses back to the same spec.
#include <charconv>

#include "models/error.hpp"
#include "models/synthetic.hpp"

namespace mk {

namespace {

struct DTypeName {
    const char* name;
    DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
    {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K},
};

std::vector<std::string_view> split(std::string_view text, char sep) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); ++i)
        if (i == text.size() || text[i] == sep) {
            parts.push_back(text.substr(start, i - start));
            start = i + 1;
        }
    return parts;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return out;
}

// The optional size fields, by spec key, in canonical order.
struct Override {
    const char* key;
    std::optional<int64_t> SyntheticSpec::*field;
};
constexpr Override kOverrides[] = {
    {"layers", &SyntheticSpec::n_layers},   {"vocab", &SyntheticSpec::vocab_size},
    {"d_model", &SyntheticSpec::d_model},   {"heads", &SyntheticSpec::n_heads},
    {"kv_heads", &SyntheticSpec::n_kv_heads}, {"head_dim", &SyntheticSpec::head_dim},
    {"ff", &SyntheticSpec::d_ff},           {"context", &SyntheticSpec::context_length},
};

std::string_view spec_dtype_name(DType dtype) {
    for (const DTypeName& d : kDTypes)
        if (d.dtype == dtype) return d.name;
    fail("synthetic models do not support dtype {}", uint32_t(dtype));
}

}  // namespace

bool is_synthetic_spec(std::string_view text) { return text.starts_with("synthetic:"); }

SyntheticSpec parse_synthetic_spec(std::string_view text) {
    const std::string where = fmt::format("synthetic spec '{}'", text);
    if (!is_synthetic_spec(text)) fail("{}: must start with 'synthetic:'", where);
    std::vector<std::string_view> parts = split(text, ':');
    if (parts.size() < 3) fail("{}: expected synthetic:SHAPE:DTYPE[:key=value]...", where);

    SyntheticSpec spec;
    spec.shape = lower(parts[1]);
    with_context(where, [&] { synthetic_config(spec.shape); });  // an unknown shape lists the known ones
    std::string dtype = lower(parts[2]);
    bool found = false;
    for (const DTypeName& d : kDTypes)
        if (dtype == d.name) spec.dtype = d.dtype, found = true;
    if (!found) fail("{}: unknown dtype '{}' (known: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q6_k)", where, parts[2]);

    for (size_t i = 3; i < parts.size(); ++i) {
        std::string_view part = parts[i];
        size_t eq = part.find('=');
        if (eq == std::string_view::npos) fail("{}: '{}' is not key=value", where, part);
        std::string key = lower(part.substr(0, eq));
        std::string_view value = part.substr(eq + 1);
        if (key == "format") {
            if (value == "gguf") spec.format = ModelFormat::gguf;
            else if (value == "safetensors") spec.format = ModelFormat::safetensors;
            else fail("{}: format={}: expected gguf or safetensors", where, value);
            continue;
        }
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || value.empty())
            fail("{}: {}: '{}' is not a non-negative integer", where, key, value);
        if (key == "seed") {
            spec.seed = n;
            continue;
        }
        bool known = false;
        for (const Override& o : kOverrides)
            if (key == o.key) {
                if (n == 0 || n > (uint64_t(1) << 32)) fail("{}: {}={} is out of range", where, key, n);
                spec.*o.field = int64_t(n);
                known = true;
            }
        if (!known)
            fail("{}: unknown key '{}' (known: layers vocab seed format d_model heads kv_heads head_dim ff context)",
                 where, key);
    }
    if (spec.format == ModelFormat::safetensors && spec.dtype != DType::F32 && spec.dtype != DType::F16 &&
        spec.dtype != DType::BF16)
        fail("{}: safetensors stores f32, f16 or bf16, not {}", where, dtype);
    with_context(where, [&] { synthetic_config(spec); });  // overrides must give a valid config
    return spec;
}

std::string to_string(const SyntheticSpec& spec) {
    std::string s = fmt::format("synthetic:{}:{}", spec.shape, spec_dtype_name(spec.dtype));
    for (const Override& o : kOverrides)
        if (spec.*o.field) s += fmt::format(":{}={}", o.key, *(spec.*o.field));
    s += fmt::format(":seed={}:format={}", spec.seed, format_name(spec.format));
    return s;
}

}  // namespace mk

// Model argument resolution (see model_source.hpp).
#include "runtime/model_source.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include "models/error.hpp"
#include "models/model_cache.hpp"
#include "models/synthetic.hpp"

namespace mk {

std::filesystem::path resolve_model_path(const std::string& model_arg) {
    namespace fs = std::filesystem;
    if (model_arg.empty()) {
        fs::path path = default_model_path();
        if (!fs::exists(path))
            fail("the default model {} is missing; fetch it with: tools/setup.sh (or pass -m MODEL)", path.string());
        return path;
    }
    if (!is_synthetic_spec(model_arg)) {
        if (!fs::exists(model_arg)) fail("{}: no such model file or directory", model_arg);
        return model_arg;
    }
    SyntheticSpec spec = parse_synthetic_spec(model_arg);
    std::string name = to_string(spec);
    for (char& c : name)
        if (c == ':' || c == '/' || c == '=') c = '_';
    fs::path dir = model_cache_dir() / "synthetic";
    fs::create_directories(dir);
    fs::path out = dir / (name + (spec.format == ModelFormat::gguf ? ".gguf" : ""));
    if (!fs::exists(out)) {
        // Write beside the final name and rename, so an interrupted write never looks complete.
        fs::path tmp = dir / fmt::format("{}.tmp{}", name, ::getpid());
        write_synthetic_model(spec, tmp);
        fs::rename(tmp, out);
    }
    return out;
}

Model open_model(const std::string& model_arg) { return load_model(resolve_model_path(model_arg)); }

}  // namespace mk

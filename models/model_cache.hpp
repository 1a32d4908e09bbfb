// Where mk keeps downloaded models: $MK_CACHE, else ~/.cache/mk. tools/setup.sh fills it.
#pragma once
#include <cstdlib>
#include <filesystem>

namespace mk {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

inline std::filesystem::path model_cache_dir() {
    if (const char* env = std::getenv("MK_CACHE"); env && *env) return env;
    if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "mk";
    return std::filesystem::path("/root/.cache/mk");
}

inline std::filesystem::path default_model_path() { return model_cache_dir() / kDefaultModelFile; }

}  // namespace mk

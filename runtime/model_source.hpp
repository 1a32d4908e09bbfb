// Resolves a model argument (the API's Model::load, every CLI command's -m): a model path, a synthetic
// spec ("synthetic:llama-3.2-1b:bf16"), or "" (the default model from the cache).
#pragma once
#include <filesystem>
#include <string>

#include "models/model.hpp"

namespace mk {

// The file or directory to load; synthetic specs are written once into $MK_CACHE/synthetic/.
// Throws mk::Error with the fetch command when the default model is missing.
std::filesystem::path resolve_model_path(const std::string& model_arg);
Model open_model(const std::string& model_arg);

}  // namespace mk

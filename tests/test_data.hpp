// The real test data no one here wrote: llama.cpp's vocabularies (with HF-made token-id vectors) and real
// chat templates, from the llama-cpp-python 0.3.36 sdist; tools/setup.sh --test fetches and checks them.
#pragma once
#include <filesystem>

#include "models/model_cache.hpp"

#ifndef MK_TEST_DATA_DIR
#define MK_TEST_DATA_DIR ""
#endif

namespace mk::test {

// The folder mirrors the sdist's vendor/llama.cpp/models/: ggml-vocab-*.gguf{,.inp,.out}, templates/*.jinja.
// MK_TEST_DATA (CMake) overrides; by default it sits in the model cache ($MK_CACHE, else ~/.cache/mk).
inline std::filesystem::path real_data_dir() {
    if (*MK_TEST_DATA_DIR) return MK_TEST_DATA_DIR;
    return mk::model_cache_dir() / "test-data" / "llama-cpp-python-0.3.36";
}

inline constexpr const char* kFetchRealData = "./tools/setup.sh --test";

}  // namespace mk::test

// Where tests find their data: the real shared vocabularies, the default model and per-run outputs.
#pragma once
#include <filesystem>

#include "models/model_cache.hpp"

namespace mk::test {

inline std::filesystem::path shared_data_dir() { return MK_SHARED_DATA_DIR; }
inline std::filesystem::path source_dir() { return MK_SOURCE_DIR; }
// Per-run outputs (synthetic models, oracle results); created by the testdata fixture.
inline std::filesystem::path output_dir() { return MK_TEST_OUTPUT_DIR; }

// The default model, fetched by tools/setup.sh.
inline std::filesystem::path default_model_path() { return mk::default_model_path(); }

}  // namespace mk::test

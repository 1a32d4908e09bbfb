// Where tests find their data: the source tree, the default model and per-run outputs (real vocabularies
// and templates: test_data.hpp).
#pragma once
#include <filesystem>

#include "models/model_cache.hpp"

namespace mk::test {

inline std::filesystem::path source_dir() { return MK_SOURCE_DIR; }
// Per-run outputs (synthetic models, oracle results); created by the testdata fixture.
inline std::filesystem::path output_dir() { return MK_TEST_OUTPUT_DIR; }

// The default model, fetched by tools/setup.sh.
inline std::filesystem::path default_model_path() { return mk::default_model_path(); }

}  // namespace mk::test

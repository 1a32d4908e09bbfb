// Where tests find their data: the source tree, the default model and per-run outputs (real vocabularies
// and templates: test_data.hpp).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "models/model_cache.hpp"
#include "models/synthetic.hpp"

namespace mk::test {

inline std::filesystem::path source_dir() { return MK_SOURCE_DIR; }
// Per-run outputs (synthetic models, oracle results); created by the testdata fixture.
inline std::filesystem::path output_dir() { return MK_TEST_OUTPUT_DIR; }

// The default model, fetched by tools/setup.sh.
inline std::filesystem::path default_model_path() { return mk::default_model_path(); }

// A synthetic model written once into output_dir()/file_name; the rename keeps it atomic when several
// test processes race to write it.
inline std::string synthetic_model_file(const std::string& spec, const std::string& file_name) {
    const std::filesystem::path path = output_dir() / file_name;
    if (!std::filesystem::exists(path)) {
        const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
        mk::write_synthetic_model(mk::parse_synthetic_spec(spec), tmp);
        std::filesystem::rename(tmp, path);
    }
    return path.string();
}

}  // namespace mk::test

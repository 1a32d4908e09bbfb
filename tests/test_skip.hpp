// Tests whose input is absent report SKIPPED, never a pass or an unrelated failure. Catch2 2.13 has no
// SKIP, so the test prints kSkipMarker and returns; ctest's SKIP_REGULAR_EXPRESSION (tests/CMakeLists.txt)
// turns that into a skip.
#pragma once
#include <filesystem>
#include <iostream>
#include <string_view>

namespace mk::test {

inline constexpr std::string_view kSkipMarker = "MK-TEST-SKIPPED:";

// True (after reporting the skip) when `path` is missing; `fetch` is the command that provides it.
inline bool skip_if_missing(const std::filesystem::path& path, std::string_view fetch) {
    if (std::filesystem::exists(path)) return false;
    std::cout << kSkipMarker << " " << path.string() << " is missing; run " << fetch << "\n";
    return true;
}

}  // namespace mk::test

// Ends the current TEST_CASE as skipped when `path` is missing.
#define MK_SKIP_IF_MISSING(path, fetch)                                  \
    do {                                                                 \
        if (::mk::test::skip_if_missing((path), (fetch))) return;       \
    } while (0)

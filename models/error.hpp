// mk::Error: the one exception type the library throws. Messages carry context added on the
// way up ("model.gguf: tensor blk.3.ffn_up: expected Q4_1 [576,1536], got F16"); only tools/ catches.
#pragma once
#include <fmt/format.h>
#include <string>

#include "mk/error.hpp"  // the class itself is public (include/mk/), below every layer

namespace mk {

// Throws mk::Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Runs body(); an mk::Error escaping it is rethrown with "context: " prepended.
template <typename Body>
decltype(auto) with_context(const std::string& context, Body&& body) {
    try {
        return body();
    } catch (const Error& e) {
        throw Error(context + ": " + e.what());
    }
}

}  // namespace mk

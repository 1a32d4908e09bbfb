// mk::Error: the one exception type mk throws, at its public API as everywhere inside. Its message
// carries the context added on the way up ("model.gguf: tensor blk.3.ffn_up: expected Q4_1 ...").
#pragma once
#include <stdexcept>
#include <string>

namespace mk {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mk

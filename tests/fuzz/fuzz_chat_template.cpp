// Fuzz target: detect_chat_family / ChatTemplate::parse on fuzzed template text, then render with fuzzed
// message content. Input: template text, '\0', then message contents separated by '\0' (roles cycle).
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/chat_template.hpp"
#include "models/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t end = input.find('\0');
    const std::string_view text = input.substr(0, end);
    std::vector<mk::ChatMessage> messages;
    static const char* const kRoles[] = {"system", "user", "assistant", "user"};
    for (size_t pos = end; pos != std::string_view::npos && pos < input.size();) {
        const size_t next = input.find('\0', pos + 1);
        const std::string_view content = input.substr(pos + 1, next == std::string_view::npos ? next : next - pos - 1);
        messages.push_back({kRoles[messages.size() % 4], std::string(content)});
        pos = next;
    }
    if (messages.empty()) messages.push_back({"user", "Hello <think>x</think>"});
    try {
        (void)mk::detect_chat_family(text);
        const mk::ChatTemplate chat = mk::ChatTemplate::parse(text, "<s>");
        (void)chat.render(messages, true);
        (void)chat.render(messages, false);
    } catch (const mk::Error&) {
    }
    return 0;
}

// Chat prompts for the two template families mk knows, recognised from the model's own Jinja
// tokenizer.chat_template and rendered as that template renders a plain conversation (no tools).
#pragma once
#include <span>
#include <string>
#include <string_view>

namespace mk {

class GgufFile;

enum class ChatFamily { chatml, llama3 };

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

// ChatML: "<|im_start|>"; Llama 3: "<|start_header_id|>". Otherwise throws mk::Error saying what the
// template looks like (Gemma, Llama 2 [INST], ...) and how it begins.
ChatFamily detect_chat_family(std::string_view template_text);
const char* chat_family_name(ChatFamily family);

class ChatTemplate {
public:
    // bos_token: the text the template's {{ bos_token }} renders (Llama 3 default "<|begin_of_text|>").
    static ChatTemplate parse(std::string_view template_text, std::string bos_token = "");
    // tokenizer.chat_template of a GGUF file, with its BOS token text.
    static ChatTemplate from_gguf(const GgufFile& file);

    ChatFamily family() const { return family_; }
    // ChatML: the system prompt inserted when the conversation has none ("" if the template has none).
    const std::string& default_system() const { return default_system_; }

    // The prompt text, special tokens spelled out; encode it with parse_special = true.
    std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

private:
    std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
    std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

    ChatFamily family_ = ChatFamily::chatml;
    std::string default_system_;
    bool strips_reasoning_ = false;  // Qwen3: history drops <think>...</think>; the last turn keeps it
    std::string bos_token_;
    std::string knowledge_date_;  // Llama 3.1+: "Cutting Knowledge Date: ..." preamble, "" if none
    std::string today_date_;      // its date_string default ("26 Jul 2024"), used instead of today
};

}  // namespace mk

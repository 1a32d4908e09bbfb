// Chat templates: family detection, the few constants read out of the Jinja text (default system prompt,
// Llama 3.1 date preamble, Qwen3 reasoning handling) and the per-family renderers.
#include "models/chat_template.hpp"

#include "models/error.hpp"
#include "models/gguf.hpp"

namespace mk {
namespace {

// Markers of families mk does not render, to say what an unsupported template is.
struct KnownMarker {
    std::string_view marker, family;
};
constexpr KnownMarker kOtherFamilies[] = {
    {"<start_of_turn>", "Gemma"}, {"[INST]", "Llama 2 / Mistral"},          {"<|user|>", "Phi-3 / Zephyr"},
    {"<｜User｜>", "DeepSeek"},   {"<|START_OF_TURN_TOKEN|>", "Command-R"},
};

// Jinja string-literal escapes, for text taken out of a template literal.
std::string unescape(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        char c = s[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    }
    return out;
}

// The text of the first literal '<|im_start|>system\n...<|im_end|>' in the template: the default system
// prompt. A span that leaves its string literal (a quote) is an expression such as messages[0].content.
std::string chatml_default_system(std::string_view t) {
    constexpr std::string_view open = "<|im_start|>system", close = "<|im_end|>";
    for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {
        size_t begin = at + open.size();
        if (t.substr(begin, 1) == "\n")
            begin += 1;
        else if (t.substr(begin, 2) == "\\n")
            begin += 2;
        else
            continue;
        size_t end = t.find(close, begin);
        if (end == std::string_view::npos || end == begin) continue;
        std::string_view body = t.substr(begin, end - begin);
        bool literal = true;
        for (size_t i = 0; i < body.size() && literal; ++i) {
            if (body[i] == '\\')
                ++i;
            else if (body[i] == '\'' || body[i] == '"')
                literal = false;
        }
        if (literal) return unescape(body);
    }
    return "";
}

// The text after `prefix` up to the closing quote of its string literal, or "" if absent.
std::string literal_after(std::string_view t, std::string_view prefix) {
    size_t at = t.find(prefix);
    if (at == std::string_view::npos) return "";
    size_t begin = at + prefix.size();
    size_t end = t.find_first_of("\"'\\", begin);
    return end == std::string_view::npos ? "" : std::string(t.substr(begin, end - begin));
}

// Jinja's trim filter (Python str.strip) on the ASCII whitespace and separators it strips.
std::string_view trim(std::string_view s) {
    auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

ChatFamily detect_chat_family(std::string_view t) {
    if (t.find("<|im_start|>") != std::string_view::npos) return ChatFamily::chatml;
    if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatFamily::llama3;
    std::string looks_like = "an unknown family";
    for (const KnownMarker& m : kOtherFamilies)
        if (t.find(m.marker) != std::string_view::npos) {
            looks_like = fmt::format("{} ({})", m.family, m.marker);
            break;
        }
    std::string head(t.substr(0, 80));
    for (char& c : head)
        if (c == '\n') c = ' ';
    fail("chat template: neither ChatML (<|im_start|>) nor Llama 3 (<|start_header_id|>); it looks like {}: \"{}{}\"",
         looks_like, head, t.size() > 80 ? "..." : "");
}

const char* chat_family_name(ChatFamily family) { return family == ChatFamily::chatml ? "chatml" : "llama3"; }

ChatTemplate ChatTemplate::parse(std::string_view t, std::string bos_token) {
    ChatTemplate c;
    c.family_ = detect_chat_family(t);
    if (c.family_ == ChatFamily::chatml) {
        c.default_system_ = chatml_default_system(t);
        c.strips_reasoning_ = t.find("</think>") != std::string_view::npos;
    } else {
        c.bos_token_ = bos_token.empty() ? "<|begin_of_text|>" : std::move(bos_token);
        c.knowledge_date_ = literal_after(t, "Cutting Knowledge Date: ");
        // Llama 3.2 prefers strftime_now (today); the literal fallback keeps prompts reproducible.
        c.today_date_ = literal_after(t, "set date_string = \"");
    }
    return c;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
    return with_context(file.name(), [&] {
        const GgufValue* t = file.find("tokenizer.chat_template");
        if (!t) fail("tokenizer.chat_template: missing (the model has no chat template)");
        std::string bos;
        const GgufValue* bos_id = file.find("tokenizer.ggml.bos_token_id");
        const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
        if (bos_id && tokens) {
            const auto& values = with_context(
                "tokenizer.ggml.tokens", [&]() -> const auto& { return tokens->as_array().values; });
            uint64_t id = with_context("tokenizer.ggml.bos_token_id", [&] { return bos_id->as_u64(); });
            if (id < values.size()) bos = with_context("tokenizer.ggml.tokens", [&] { return values[id].as_string(); });
        }
        return with_context("tokenizer.chat_template", [&] { return parse(t->as_string(), bos); });
    });
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return family_ == ChatFamily::chatml ? render_chatml(messages, add_generation_prompt)
                                         : render_llama3(messages, add_generation_prompt);
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::string out;
    auto turn = [&](std::string_view role, std::string_view content) {
        out += "<|im_start|>";
        out += role;
        out += '\n';
        out += content;
        out += "<|im_end|>\n";
    };
    if (!messages.empty() && messages[0].role != "system" && !default_system_.empty()) turn("system", default_system_);
    size_t last_query = messages.size();  // Qwen3: reasoning is kept only after the last user message
    for (size_t i = messages.size(); i-- > 0;)
        if (messages[i].role == "user") {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (!strips_reasoning_ || m.role != "assistant") {
            turn(m.role, m.content);
            continue;
        }
        // Qwen3: "<think>reasoning</think>answer"; turns up to the last user message keep only the answer,
        // later ones (the last, or any with reasoning) are re-rendered with the think block.
        std::string_view content = m.content, reasoning;
        if (size_t end_think = content.rfind("</think>"); end_think != std::string_view::npos) {
            reasoning = content.substr(0, content.find("</think>"));
            content = content.substr(end_think + 8);
            while (content.starts_with('\n')) content.remove_prefix(1);
            while (reasoning.ends_with('\n')) reasoning.remove_suffix(1);
            if (size_t open = reasoning.rfind("<think>"); open != std::string_view::npos)
                reasoning.remove_prefix(open + 7);
            while (reasoning.starts_with('\n')) reasoning.remove_prefix(1);
        }
        if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
            while (content.starts_with('\n')) content.remove_prefix(1);
            turn(m.role, "<think>\n" + std::string(reasoning) + "\n</think>\n\n" + std::string(content));
        } else {
            turn(m.role, content);
        }
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::string out;
    auto turn = [&](std::string_view role, std::string_view content) {
        out += "<|start_header_id|>";
        out += role;
        out += "<|end_header_id|>\n\n";
        out += trim(content);
        out += "<|eot_id|>";
    };
    if (!knowledge_date_.empty()) {
        // Llama 3.1+: the system turn always exists and carries the dates before the system message.
        out += bos_token_;
        std::string_view system;
        if (!messages.empty() && messages[0].role == "system") {
            system = messages[0].content;
            messages = messages.subspan(1);
        }
        out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: " + knowledge_date_ +
               "\nToday Date: " + today_date_ + "\n\n";
        out += trim(system);
        out += "<|eot_id|>";
    } else if (!messages.empty()) {
        out += bos_token_;  // Llama 3.0 puts BOS in front of the first message
    }
    for (const ChatMessage& m : messages) turn(m.role, m.content);
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

}  // namespace mk

// ChatTurns (see chat_turns.hpp).
#include "tools/chat_turns.hpp"

#include <fmt/core.h>

#include "mk/error.hpp"

namespace mk::tools {

namespace {
constexpr const char* kUser = "mk-placeholder-user-message";
constexpr const char* kReply = "mk-placeholder-assistant-reply";
bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
}  // namespace

std::string ChatTurns::render(const std::vector<api::ChatMessage>& messages, bool add_generation_prompt) const {
    std::vector<api::ChatMessage> all;
    if (!system_.empty()) all.push_back({"system", system_});
    all.insert(all.end(), messages.begin(), messages.end());
    return model_.apply_chat_template(all, add_generation_prompt);
}

ChatTurns::ChatTurns(const api::Model& model, std::string system) : model_(model), system_(std::move(system)) {
    if (!model.info().has_chat_template) throw Error(model.info().path + ": mk chat: the model has no chat template");
    const std::string asked = render({{"user", kUser}}, true);
    base_ = render({{"user", kUser}, {"assistant", kReply}}, false);
    const std::string reply = asked + kReply;
    if (!starts_with(base_, reply))
        throw Error(model.info().path + ": mk chat: the chat template does not render a reply after its prompt");
    closing_ = base_.substr(reply.size());
    const std::string user = render({{"user", kUser}, {"assistant", kReply}, {"user", kUser}}, true).substr(base_.size());
    const size_t at = asked.rfind(user);
    if (at == std::string::npos || at + user.size() != asked.size())
        throw Error(model.info().path + ": mk chat: the chat template does not render turns incrementally");
    prefix_ = asked.substr(0, at);
}

ChatTurns::Tokens ChatTurns::user_turn(const std::string& text, bool first) const {
    const std::string next = render({{"user", kUser}, {"assistant", kReply}, {"user", text}}, true);
    if (!starts_with(next, base_))
        throw Error("mk chat: the chat template renders this turn differently from the conversation before it");
    const std::string turn = next.substr(base_.size());
    Tokens t;
    const std::string lead = first ? prefix_ : closing_;
    t.ids = model_.tokenize(lead, first);
    t.turn_offset = t.ids.size();
    const std::vector<int32_t> rest = model_.tokenize(turn, false);
    t.ids.insert(t.ids.end(), rest.begin(), rest.end());
    return t;
}

}  // namespace mk::tools

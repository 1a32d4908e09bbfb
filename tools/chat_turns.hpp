// The token sequence of a conversation, one turn at a time, from the model's own chat template: the
// first turn is the template's system prefix and the user message with the assistant's generation prompt;
// each later turn is the closing of the previous reply and the next user message. Found by rendering
// placeholder conversations and taking differences, so it holds for any template that renders a
// conversation as the concatenation of its messages (ChatML, Llama 3).
#pragma once
#include <string>
#include <vector>

#include "mk/model.hpp"

namespace mk::tools {

class ChatTurns {
public:
    // Throws mk::Error when the model has no chat template or it does not render turn by turn.
    ChatTurns(const api::Model& model, std::string system);

    struct Tokens {
        std::vector<int32_t> ids;  // what to run for this turn
        size_t turn_offset = 0;    // where the user's message starts in ids (after a system prefix or a closing)
    };
    // first: the conversation's first turn (BOS and the system prefix come first).
    Tokens user_turn(const std::string& text, bool first) const;

private:
    std::string render(const std::vector<api::ChatMessage>& messages, bool add_generation_prompt) const;

    const api::Model& model_;
    std::string system_;
    std::string closing_;     // after a reply's text: the end of the assistant message ("<|im_end|>\n")
    std::string base_;        // a rendered placeholder conversation ending with a reply, closing included
    std::string prefix_;      // before the first user message: BOS text, the system message
};

}  // namespace mk::tools

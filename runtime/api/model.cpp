// mk::api::Model (see mk/model.hpp): loading, tokenizing, chat templates, compiling and sessions.
#include "mk/model.hpp"

#include "models/chat_template.hpp"
#include "runtime/backend.hpp"
#include "runtime/api/impl.hpp"
#include "runtime/model_source.hpp"
#include "scheduler/verify.hpp"

namespace mk::api {

Model Model::load(const std::string& path_or_spec) {
    return guard(path_or_spec.empty() ? "default model" : path_or_spec.c_str(),
                 [&] { return Model(std::make_shared<const Impl>(open_model(path_or_spec))); });
}

ModelInfo Model::info() const {
    const mk::Model& m = impl_->model;
    ModelInfo info;
    info.name = m.config.name;
    info.architecture = std::string(arch_name(m.config.arch));
    info.format = std::string(format_name(m.format));
    info.path = m.path.string();
    info.n_layers = m.config.n_layers;
    info.d_model = m.config.d_model;
    info.n_heads = m.config.n_heads;
    info.n_kv_heads = m.config.n_kv_heads;
    info.vocab_size = m.config.vocab_size;
    info.context_length = m.config.context_length;
    info.weight_bytes = m.total_weight_bytes;
    info.weight_bytes_per_token = m.per_token_weight_bytes;
    for (const TensorView* t : m.weights()) info.n_params += uint64_t(t->n_elements());
    info.has_chat_template = !m.chat_template.empty();
    return info;
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool add_bos) const {
    return guard("tokenize", [&] {
        const mk::Tokenizer& tok = impl_->model.tokenizer;
        std::vector<int32_t> ids = tok.encode(text, true);
        if (!add_bos && tok.data().add_bos && !ids.empty() && ids.front() == tok.data().bos_id) ids.erase(ids.begin());
        return ids;
    });
}

std::string Model::token_to_piece(int32_t token) const {
    return guard("token_to_piece", [&] {
        if (token < 0 || size_t(token) >= impl_->model.tokenizer.vocab_size())
            fail("token id {} is outside the vocabulary ({})", token, impl_->model.tokenizer.vocab_size());
        return impl_->model.tokenizer.token_bytes(token);
    });
}

SpecialTokens Model::special_tokens() const {
    const mk::Tokenizer& tok = impl_->model.tokenizer;
    const TokenizerData& d = tok.data();
    SpecialTokens s{d.bos_id, d.eos_id, d.unk_id, d.pad_id, d.add_bos, {}};
    for (size_t id = 0; id < tok.vocab_size(); ++id)
        if (tok.is_eog(int32_t(id))) s.eog.push_back(int32_t(id));
    return s;
}

std::string Model::detokenize(std::span<const int32_t> tokens) const {
    return guard("detokenize", [&] { return impl_->model.tokenizer.decode(tokens); });
}

bool Model::is_end_of_generation(int32_t token) const { return impl_->model.tokenizer.is_eog(token); }

std::string render_chat(const mk::Model& m, std::span<const ChatMessage> messages, bool add_generation_prompt) {
    return guard(m.path.string().c_str(), [&] {
        if (m.chat_template.empty()) fail("the model has no chat template");
        std::vector<mk::ChatMessage> converted;
        for (const ChatMessage& msg : messages) converted.push_back({msg.role, msg.content});
        return ChatTemplate::parse(m.chat_template).render(converted, add_generation_prompt);
    });
}

std::string Model::apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return render_chat(impl_->model, messages, add_generation_prompt);
}

Schedule Model::compile(const BackendOptions& options) const {
    return guard("compile", [&] {
        auto impl = std::make_shared<Schedule::Impl>();
        impl->schedule = resolve_schedule(impl_->model, options);
        // Loaded files are verified by resolve_schedule; compiled ones are verified here, once.
        if (options.schedule_file.empty()) verify_or_throw(impl->schedule, "compiled schedule");
        return Schedule(std::move(impl));
    });
}

Session Model::new_session(const BackendOptions& options) const {
    return guard("session", [&] {
        auto session = std::make_unique<Session::Impl>(impl_, make_program(impl_->model, options));
        session->keep_all_logits = options.all_logits;
        return Session(std::move(session));
    });
}

Session Model::new_session(const Schedule& schedule, const BackendOptions& options) const {
    return guard("session", [&] {
        if (!options.schedule_file.empty() || !options.target.empty() || options.sms)
            fail("the schedule already fixes the target; drop schedule_file, target and sms");
        const mk::Schedule& s = schedule.impl().schedule;
        check_schedule_for(impl_->model, s, "schedule");
        auto session = std::make_unique<Session::Impl>(impl_, make_program(impl_->model, s, options));
        session->keep_all_logits = options.all_logits;
        return Session(std::move(session));
    });
}

}  // namespace mk::api

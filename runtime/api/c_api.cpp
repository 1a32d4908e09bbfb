// The C API (mk/mk.h) over the C++ API: handles own C++ objects, every call catches at the boundary and
// turns any exception into a status plus this thread's last error message.
#include "mk/mk.h"

#include <cstring>
#include <string>

#include "mk/mk.hpp"

struct mk_model {
    mk::api::Model model;
};
struct mk_session {
    mk::api::Session session;
};

namespace {

thread_local std::string g_last_error;

mk_status failed(mk_status status, std::string message) {
    g_last_error = std::move(message);
    return status;
}

template <typename Body>
mk_status call(Body&& body) {
    try {
        return body();
    } catch (const std::exception& e) {
        return failed(MK_ERROR, e.what());
    } catch (...) {
        return failed(MK_CALLBACK_ERROR, "an exception that is not a std::exception");
    }
}

mk::api::SamplingOptions to_sampling(const mk_sampling* s) {
    mk::api::SamplingOptions o;
    if (!s) return o;
    o.temperature = s->temperature;
    o.top_k = s->top_k;
    o.top_p = s->top_p;
    o.min_p = s->min_p;
    o.repeat_penalty = s->repeat_penalty;
    o.repeat_last_n = s->repeat_last_n;
    o.seed = s->seed;
    return o;
}

// Copies n items into a caller's buffer of `capacity`; *needed is n either way.
template <typename T>
mk_status copy_out(const T* data, size_t n, T* buf, size_t capacity, size_t* needed) {
    if (needed) *needed = n;
    if (n > capacity || (n && !buf))
        return failed(MK_INVALID_ARGUMENT, "the buffer holds " + std::to_string(capacity) + ", " + std::to_string(n) +
                                               " needed");
    if (n) std::memcpy(buf, data, n * sizeof(T));
    return MK_OK;
}

#define MK_REQUIRE(cond) \
    if (!(cond)) return failed(MK_INVALID_ARGUMENT, std::string(__func__) + ": " #cond " does not hold")

}  // namespace

extern "C" {

const char* mk_last_error(void) { return g_last_error.c_str(); }

mk_status mk_model_load(const char* path_or_spec, mk_model** out) {
    MK_REQUIRE(out);
    *out = nullptr;
    return call([&] {
        *out = new mk_model{mk::api::Model::load(path_or_spec ? path_or_spec : "")};
        return MK_OK;
    });
}

void mk_model_free(mk_model* model) { delete model; }

int32_t mk_model_vocab_size(const mk_model* model) { return model ? int32_t(model->model.info().vocab_size) : 0; }

mk_status mk_tokenize(const mk_model* model, const char* text, int add_bos, int32_t* tokens, size_t capacity,
                      size_t* n_tokens) {
    MK_REQUIRE(model && text);
    return call([&] {
        const std::vector<int32_t> ids = model->model.tokenize(text, add_bos != 0);
        return copy_out(ids.data(), ids.size(), tokens, capacity, n_tokens);
    });
}

mk_status mk_token_to_piece(const mk_model* model, int32_t token, char* buf, size_t capacity, size_t* n_bytes) {
    MK_REQUIRE(model);
    return call([&] {
        const std::string piece = model->model.token_to_piece(token);
        return copy_out(piece.data(), piece.size(), buf, capacity, n_bytes);
    });
}

int mk_is_end_of_generation(const mk_model* model, int32_t token) {
    return model && model->model.is_end_of_generation(token) ? 1 : 0;
}

mk_status mk_chat_prompt(const mk_model* model, const char* system, const char* user, char* buf, size_t capacity,
                         size_t* n_bytes) {
    MK_REQUIRE(model && user);
    return call([&] {
        std::vector<mk::api::ChatMessage> messages;
        if (system && *system) messages.push_back({"system", system});
        messages.push_back({"user", user});
        const std::string text = model->model.apply_chat_template(messages, true);
        const mk_status s = copy_out(text.c_str(), text.size() + 1, buf, capacity, n_bytes);  // with its NUL
        if (n_bytes) *n_bytes = text.size();
        return s;
    });
}

void mk_session_options_default(mk_session_options* o) {
    if (o) *o = {"auto", 0, 0};
}

void mk_sampling_default(mk_sampling* s) {
    if (!s) return;
    const mk::api::SamplingOptions d;
    *s = {d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.repeat_last_n, d.seed};
}

void mk_generate_options_default(mk_generate_options* o) {
    if (!o) return;
    const mk::api::GenerateOptions d;
    o->max_tokens = d.max_tokens;
    mk_sampling_default(&o->sampling);
    o->stop_at_end = d.stop_at_end ? 1 : 0;
    o->append = d.append ? 1 : 0;
}

mk_status mk_session_new(const mk_model* model, const mk_session_options* options, mk_session** out) {
    MK_REQUIRE(model && out);
    *out = nullptr;
    return call([&] {
        mk::api::BackendOptions b;
        if (options) {
            if (options->backend) b.backend = options->backend;
            b.threads = options->threads;
            b.ctx_len = options->ctx_len;
        }
        *out = new mk_session{model->model.new_session(b)};
        return MK_OK;
    });
}

void mk_session_free(mk_session* session) { delete session; }

mk_status mk_session_feed(mk_session* session, const int32_t* tokens, size_t n, const mk_sampling* sampling,
                          int32_t* next) {
    MK_REQUIRE(session && (tokens || n == 0));
    return call([&] {
        const int32_t token = session->session.feed({tokens, n}, to_sampling(sampling));
        if (next) *next = token;
        return MK_OK;
    });
}

mk_status mk_session_logits(const mk_session* session, const float** logits, size_t* n) {
    MK_REQUIRE(session && logits && n);
    return call([&] {
        const std::span<const float> z = session->session.logits();
        *logits = z.data();
        *n = z.size();
        return MK_OK;
    });
}

mk_status mk_session_sample(const mk_session* session, const mk_sampling* sampling, int32_t* token) {
    MK_REQUIRE(session && token);
    return call([&] {
        *token = session->session.sample(to_sampling(sampling));
        return MK_OK;
    });
}

int32_t mk_session_n_past(const mk_session* session) { return session ? session->session.n_past() : 0; }

mk_status mk_session_truncate(mk_session* session, int32_t n_past) {
    MK_REQUIRE(session);
    return call([&] {
        session->session.truncate(n_past);
        return MK_OK;
    });
}

mk_status mk_session_reset(mk_session* session) {
    MK_REQUIRE(session);
    return call([&] {
        session->session.reset();
        return MK_OK;
    });
}

mk_status mk_session_save(const mk_session* session, const char* path) {
    MK_REQUIRE(session && path);
    return call([&] {
        session->session.save(path);
        return MK_OK;
    });
}

mk_status mk_session_load(mk_session* session, const char* path) {
    MK_REQUIRE(session && path);
    return call([&] {
        session->session.load(path);
        return MK_OK;
    });
}

void mk_session_cancel(mk_session* session) {
    if (session) session->session.cancel();
}

mk_status mk_session_generate(mk_session* session, const int32_t* prompt, size_t n_prompt,
                              const mk_generate_options* options, mk_text_callback on_text, void* user_data,
                              mk_generate_result* result) {
    MK_REQUIRE(session && (prompt || n_prompt == 0));
    return call([&] {
        mk_generate_options c;
        mk_generate_options_default(&c);
        if (options) c = *options;
        mk::api::GenerateOptions o;
        o.max_tokens = c.max_tokens;
        o.sampling = to_sampling(&c.sampling);
        o.stop_at_end = c.stop_at_end != 0;
        o.append = c.append != 0;
        mk::api::TextCallback forward;
        if (on_text)
            forward = [&](std::string_view piece) { return on_text(piece.data(), piece.size(), user_data) != 0; };
        const mk::api::GenerateResult r = session->session.generate(std::span<const int32_t>(prompt, n_prompt), o, forward);
        if (result) {
            *result = {r.n_prompt, int32_t(r.tokens.size()), r.n_eval_steps, r.n_past, r.prompt_ms, r.eval_ms,
                       r.stopped_at_end, r.cancelled, r.context_full};
        }
        return MK_OK;
    });
}

}  // extern "C"

/* The mk C API: load a model, run sessions (feed tokens, sample, generate with a text callback), save and
 * load a session's state. Opaque handles; every call that can fail returns an mk_status, and
 * mk_last_error() gives the message of this thread's last failure. Link mk::mk (C++ runtime included). */
#ifndef MK_MK_H
#define MK_MK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mk_status {
    MK_OK = 0,
    MK_ERROR = 1,            /* the library refused or failed: see mk_last_error() */
    MK_INVALID_ARGUMENT = 2, /* a null handle or pointer, or a buffer too small (the size needed is returned) */
    MK_CALLBACK_ERROR = 3    /* the text callback threw (C++ callers only) */
} mk_status;

typedef struct mk_model mk_model;
typedef struct mk_session mk_session;

/* This thread's last error message ("" when none); valid until the thread's next failing call. */
const char* mk_last_error(void);

/* A .gguf file, an HF directory, a synthetic spec, or NULL / "" for the default model. */
mk_status mk_model_load(const char* path_or_spec, mk_model** out);
void mk_model_free(mk_model* model);
int32_t mk_model_vocab_size(const mk_model* model);
/* Text to ids (add_bos: prepend BOS when the model uses one). Writes at most capacity ids; *n_tokens is the
 * count needed (MK_INVALID_ARGUMENT when it exceeds capacity). */
mk_status mk_tokenize(const mk_model* model, const char* text, int add_bos, int32_t* tokens, size_t capacity,
                      size_t* n_tokens);
/* The bytes a token stands for (not NUL-terminated); *n_bytes as for mk_tokenize. */
mk_status mk_token_to_piece(const mk_model* model, int32_t token, char* buf, size_t capacity, size_t* n_bytes);
int mk_is_end_of_generation(const mk_model* model, int32_t token);
/* One user message in the model's chat template (system may be NULL), NUL-terminated into buf. */
mk_status mk_chat_prompt(const mk_model* model, const char* system, const char* user, char* buf, size_t capacity,
                         size_t* n_bytes);

typedef struct mk_session_options {
    const char* backend;  /* "cpu" | "cuda" | "cuda-kernels" | "auto" (default "auto") */
    uint32_t threads;     /* CPU worker threads; 0 one per core */
    uint32_t ctx_len;     /* KV-cache positions; 0 min(model context, 4096) */
} mk_session_options;
void mk_session_options_default(mk_session_options* options);

typedef struct mk_sampling {
    float temperature; /* 0 greedy */
    int32_t top_k;     /* 0 off */
    float top_p;       /* 1 off */
    float min_p;       /* 0 off */
    float repeat_penalty;
    int32_t repeat_last_n;
    uint64_t seed;
} mk_sampling;
void mk_sampling_default(mk_sampling* sampling);

mk_status mk_session_new(const mk_model* model, const mk_session_options* options, mk_session** out);
void mk_session_free(mk_session* session);

/* Runs n tokens at the next positions; *next (may be NULL) is the token sampled after the last one. */
mk_status mk_session_feed(mk_session* session, const int32_t* tokens, size_t n, const mk_sampling* sampling,
                          int32_t* next);
/* The logits after the last token run: (vocab) floats, valid until the session's next call. */
mk_status mk_session_logits(const mk_session* session, const float** logits, size_t* n);
mk_status mk_session_sample(const mk_session* session, const mk_sampling* sampling, int32_t* token);
int32_t mk_session_n_past(const mk_session* session);
mk_status mk_session_truncate(mk_session* session, int32_t n_past);
mk_status mk_session_reset(mk_session* session);
mk_status mk_session_save(const mk_session* session, const char* path);
mk_status mk_session_load(mk_session* session, const char* path);
/* Stops the generation in progress after its current step; any thread. */
void mk_session_cancel(mk_session* session);

/* Receives each complete piece of UTF-8 text (not NUL-terminated); return 0 to stop the generation. */
typedef int (*mk_text_callback)(const char* piece, size_t n, void* user_data);

typedef struct mk_generate_options {
    int32_t max_tokens; /* default 128 */
    mk_sampling sampling;
    int stop_at_end;    /* stop at end-of-generation tokens (default 1) */
    int append;         /* continue the session's sequence (default 0: start afresh) */
} mk_generate_options;
void mk_generate_options_default(mk_generate_options* options);

typedef struct mk_generate_result {
    int32_t n_prompt, n_generated, n_eval_steps, n_past;
    double prompt_ms, eval_ms;
    int stopped_at_end, cancelled, context_full;
} mk_generate_result;

/* The prompt's tokens, then up to max_tokens tokens; result may be NULL. */
mk_status mk_session_generate(mk_session* session, const int32_t* prompt, size_t n_prompt,
                              const mk_generate_options* options, mk_text_callback on_text, void* user_data,
                              mk_generate_result* result);

#ifdef __cplusplus
}
#endif

#endif /* MK_MK_H */

/* A C program embedding mk through mk.h: load a model, generate a reply with a streaming callback, save
 * the session's state, load it into a new session and check that both continue with the same token.
 * Usage: c_example [MODEL] [-n N]   (MODEL: a .gguf, an HF directory or a synthetic spec; default model) */
#include <mk/mk.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_piece(const char* piece, size_t n, void* user_data) {
    (void)user_data;
    fwrite(piece, 1, n, stdout);
    fflush(stdout);
    return 1; /* 0 would stop the generation */
}

static int check(mk_status status, const char* what) {
    if (status == MK_OK) return 0;
    fprintf(stderr, "c_example: %s: %s\n", what, mk_last_error());
    return 1;
}

int main(int argc, char** argv) {
    const char* model_path = "";
    int32_t n = 24;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atoi(argv[++i]);
        else model_path = argv[i];
    }
    mk_model* model = NULL;
    if (check(mk_model_load(model_path, &model), "load")) return 1;

    /* The model's chat template when it has one, else the plain text. */
    const char* question = "What is the capital of France?";
    char prompt[4096];
    size_t n_bytes = 0;
    if (mk_chat_prompt(model, NULL, question, prompt, sizeof prompt, &n_bytes) != MK_OK)
        snprintf(prompt, sizeof prompt, "%s", question);

    int32_t tokens[1024];
    size_t n_tokens = 0;
    if (check(mk_tokenize(model, prompt, 1, tokens, 1024, &n_tokens), "tokenize")) return 1;

    mk_session_options options;
    mk_session_options_default(&options);
    options.ctx_len = 512;
    mk_session* session = NULL;
    if (check(mk_session_new(model, &options, &session), "session")) return 1;

    mk_generate_options generate;
    mk_generate_options_default(&generate);
    generate.max_tokens = n;
    mk_generate_result result;
    printf("%s\n", question);
    if (check(mk_session_generate(session, tokens, n_tokens, &generate, print_piece, NULL, &result), "generate")) return 1;
    printf("\n[%d prompt tokens, %d generated, %.1f tokens/s]\n", result.n_prompt, result.n_generated,
           result.eval_ms > 0 ? 1000.0 * result.n_eval_steps / result.eval_ms : 0.0);

    /* Save, load into a new session, and run one more token in both: they must agree. */
    const char* state = "c_example.mkstate";
    mk_session* resumed = NULL;
    if (check(mk_session_save(session, state), "save") || check(mk_session_new(model, &options, &resumed), "session") ||
        check(mk_session_load(resumed, state), "load state"))
        return 1;
    remove(state);
    mk_sampling greedy;
    mk_sampling_default(&greedy);
    const int32_t next_input = 13; /* any token id */
    int32_t a = -1, b = -1;
    if (check(mk_session_feed(session, &next_input, 1, &greedy, &a), "feed") ||
        check(mk_session_feed(resumed, &next_input, 1, &greedy, &b), "feed resumed"))
        return 1;
    printf("state: %d tokens saved and loaded; both sessions continue with token %d%s\n", mk_session_n_past(resumed) - 1,
           a, a == b ? "" : " (MISMATCH)");

    mk_session_free(resumed);
    mk_session_free(session);
    mk_model_free(model);
    return a == b ? 0 : 1;
}

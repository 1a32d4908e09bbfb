// A minimal host program: loads a model (the default one, or a path / synthetic spec), answers one chat
// message with the model's chat template and streams the reply to stdout.
//   embed [-n MAX_TOKENS] [MODEL] ["message"]
#include <mk/mk.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
    std::string model_path, message = "What is the capital of France?";
    mk::api::GenerateOptions options;
    options.chat = true;
    options.max_tokens = 64;
    int n_positional = 0;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "-n" && i + 1 < argc) {
            options.max_tokens = std::atoi(argv[++i]);
        } else if (arg.starts_with("-")) {
            std::fprintf(stderr, "usage: embed [-n MAX_TOKENS] [MODEL] [\"message\"]\n");
            return 2;
        } else {
            (n_positional++ == 0 ? model_path : message) = arg;
        }
    }
    try {
        const mk::api::Model model = mk::api::Model::load(model_path);  // "" is the default model
        mk::api::Session session = model.new_session();
        mk::api::GenerateResult result = session.generate(message, options, [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;  // false would stop the generation here
        });
        std::printf("\n");
        std::fflush(stdout);
        std::fprintf(stderr, "[%d prompt tokens, %d generated, %.1f tokens/s]\n", result.n_prompt,
                     int(result.tokens.size()), result.eval_tokens_per_s());
    } catch (const mk::Error& e) {
        std::fprintf(stderr, "embed: error: %s\n", e.what());
        return 1;
    }
    return 0;
}

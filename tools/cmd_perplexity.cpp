// mk perplexity: a model's perplexity on a text by llama.cpp's `llama-perplexity` method, so figures
// compare with llama.cpp's on the same model, text and context: the text tokenized once, cut into
// floor(tokens / CTX) chunks, each run from an empty cache (BOS replacing its first token when the model
// adds BOS) and scored on its second half, in double. A chunk runs in prefill steps that keep every token's
// logits (BackendOptions::all_logits), as llama-perplexity runs its batches.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <span>
#include <vector>

#include "mk/mk.hpp"
#include "tools/backend_options.hpp"
#include "tools/commands.hpp"

namespace mk::tools {

namespace {

struct PerplexityCli {
    std::string model, file;
    uint32_t ctx = 512;
    int32_t max_chunks = -1;  // -1: every chunk
    BackendOptions backend;
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(std::span<const float> logits, int32_t target) {
    double max = logits[0];
    for (float z : logits) max = std::max(max, double(z));
    double sum = 0.0;
    for (float z : logits) sum += std::exp(double(z) - max);
    return std::log(sum) - (double(logits[size_t(target)]) - max);
}

void run(const PerplexityCli& o) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read the text", o.file));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (o.ctx < 8 || o.ctx % 2) throw Error(fmt::format("-c {}: perplexity needs an even context of at least 8", o.ctx));

    const auto t0 = std::chrono::steady_clock::now();
    api::Model model = api::Model::load(o.model);
    const std::vector<int32_t> tokens = model.tokenize(text);
    const size_t n_ctx = o.ctx;
    // llama-perplexity's own floor: two contexts' worth of tokens.
    if (tokens.size() < 2 * n_ctx)
        throw Error(fmt::format("{}: {} tokens; perplexity with a context of {} needs at least {}", o.file,
                                tokens.size(), n_ctx, 2 * n_ctx));
    size_t n_chunks = tokens.size() / n_ctx;
    if (o.max_chunks >= 0) n_chunks = std::min(n_chunks, size_t(o.max_chunks));
    if (n_chunks == 0) throw Error("--chunks 0: nothing to evaluate");

    BackendOptions backend = o.backend;
    backend.ctx_len = o.ctx;
    backend.all_logits = true;  // every fed token's logits: a chunk runs as prefill steps, not token by token
    backend.batch = std::min(backend.batch, o.ctx);  // a feed holds at most CTX - 1 tokens: no longer step compiled
    api::Session session = model.new_session(backend);
    const api::SpecialTokens special = model.special_tokens();
    fmt::print(stderr, "mk: perplexity over {} chunk{} of {} tokens ({} tokens in {}), backend {} on {} threads\n",
               n_chunks, n_chunks == 1 ? "" : "s", n_ctx, tokens.size(), o.file, session.backend(), session.n_threads());

    const size_t first = n_ctx / 2;  // the first half only gives the scored tokens a context
    double nll = 0.0, nll2 = 0.0;
    size_t count = 0;
    const auto t_eval = std::chrono::steady_clock::now();
    for (size_t c = 0; c < n_chunks; ++c) {
        session.reset();
        std::vector<int32_t> chunk(tokens.begin() + int64_t(c * n_ctx), tokens.begin() + int64_t((c + 1) * n_ctx));
        if (special.add_bos) chunk[0] = special.bos;
        // Tokens 0 .. CTX-2 in feeds of at most one prefill step (-b): the logits kept are a step's, not the chunk's.
        const size_t part = std::max<size_t>(1, session.prefill_chunk());
        for (size_t j0 = 0; j0 + 1 < n_ctx; j0 += part) {
            const size_t n = std::min(part, n_ctx - 1 - j0);
            session.feed(std::span<const int32_t>(chunk).subspan(j0, n));
            const std::span<const float> logits = session.feed_logits();  // (n, vocab): token j0 + i's at row i
            const size_t vocab = logits.size() / n;
            for (size_t j = std::max(j0, first); j < j0 + n; ++j) {
                const double v = negative_log_likelihood(logits.subspan((j - j0) * vocab, vocab), chunk[j + 1]);
                nll += v;
                nll2 += v * v;
                ++count;
            }
        }
        fmt::print("[{}]{:.4f},", c + 1, std::exp(nll / double(count)));
        std::fflush(stdout);
    }
    const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
    const double mean = nll / double(count), ppl = std::exp(mean);
    const double var = nll2 / double(count) - mean * mean;
    fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, var > 0 ? ppl * std::sqrt(var / double(count - 1)) : 0.0);
    fmt::print(stderr, "mk: {:.2f} s ({:.2f} ms per token, {:.2f} s load)\n", eval_s,
               1000.0 * eval_s / double(n_chunks * (n_ctx - 1)),
               std::chrono::duration<double>(t_eval - t0).count());
}

}  // namespace

void register_perplexity(CLI::App& app) {
    auto o = std::make_shared<PerplexityCli>();
    CLI::App* cmd = app.add_subcommand(
        "perplexity", "A model's perplexity on a text, as llama.cpp's llama-perplexity computes it");
    cmd->add_option("-m,--model", o->model, "A .gguf file, an HF directory or a synthetic spec (default: SmolLM2-135M-Instruct)");
    cmd->add_option("-f,--file", o->file, "The text")->required();
    cmd->add_option("--chunks", o->max_chunks, "Evaluate at most N chunks (default: all)")->check(CLI::NonNegativeNumber);
    add_backend_options(cmd, o->backend);
    // -c is the chunk size here, as in llama-perplexity (default 512).
    cmd->get_option("--ctx-size")->description("Tokens per chunk: the context each chunk is evaluated in (default 512)");
    cmd->callback([o] {
        if (o->backend.ctx_len) o->ctx = o->backend.ctx_len;
        run(*o);
    });
}

}  // namespace mk::tools

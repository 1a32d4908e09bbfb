// Tokenizer loaders: GGUF tokenizer.ggml.* metadata and HF tokenizer.json (+ tokenizer_config.json).
// Errors name the file and the key or JSON field: "vocab.gguf: tokenizer.ggml.merges[17]: ...".
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/tokenizer_impl.hpp"

namespace mk {
namespace {

using nlohmann::json;

// Reads tokenizer.ggml.<key>, adding "key" or "key[i]" to any error.
class GgufKeys {
public:
    explicit GgufKeys(const GgufFile& file) : file_(file) {}

    const GgufValue* find(const std::string& key) const { return file_.find("tokenizer.ggml." + key); }

    template <typename Convert>
    auto scalar(const std::string& key, Convert convert) const {
        return with_context("tokenizer.ggml." + key, [&] { return convert(*find(key)); });
    }

    // Calls each(i, value) over the array tokenizer.ggml.<key>; required arrays throw when missing.
    template <typename Each>
    size_t array(const std::string& key, bool required, Each each) const {
        const std::string full = "tokenizer.ggml." + key;
        const GgufValue* v = find(key);
        if (!v) {
            if (required) fail("{}: missing", full);
            return 0;
        }
        const GgufArray& a = with_context(full, [&]() -> const GgufArray& { return v->as_array(); });
        size_t i = 0;
        try {
            for (; i < a.values.size(); ++i) each(i, a.values[i]);
        } catch (const Error& e) {
            fail("{}[{}]: {}", full, i, e.what());
        }
        return a.values.size();
    }

private:
    const GgufFile& file_;
};

int32_t to_id(const GgufValue& v) {
    int64_t id = v.as_i64();
    if (id < -1 || id > INT32_MAX) fail("token id {} out of range", id);
    return static_cast<int32_t>(id);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
    return with_context(file.name(), [&] {
        GgufKeys keys(file);
        TokenizerData data;
        if (!keys.find("model")) fail("tokenizer.ggml.model: missing (the file has no tokenizer)");
        std::string model = keys.scalar("model", [](const GgufValue& v) { return v.as_string(); });
        if (model == "gpt2")
            data.kind = TokenizerKind::byte_bpe;
        else if (model == "llama")
            data.kind = TokenizerKind::sentencepiece_bpe;
        else
            fail("tokenizer.ggml.model: unsupported tokenizer '{}' (mk reads gpt2 and llama)", model);
        const bool spm = data.kind == TokenizerKind::sentencepiece_bpe;
        if (keys.find("pre")) data.pre = keys.scalar("pre", [](const GgufValue& v) { return v.as_string(); });

        keys.array("tokens", true, [&](size_t, const GgufValue& v) { data.tokens.push_back(v.as_string()); });
        size_t n = data.tokens.size();
        auto check_count = [&](const char* key, size_t count) {
            if (count != 0 && count != n) fail("tokenizer.ggml.{}: {} entries for {} tokens", key, count, n);
        };
        check_count("scores", keys.array("scores", spm, [&](size_t, const GgufValue& v) {
            data.scores.push_back(static_cast<float>(v.as_f64()));
        }));
        check_count("token_type", keys.array("token_type", false, [&](size_t, const GgufValue& v) {
            int64_t t = v.as_i64();
            if (t < 1 || t > 6) fail("unknown token type {}", t);
            data.types.push_back(static_cast<TokenType>(t));
        }));
        keys.array("merges", !spm, [&](size_t, const GgufValue& v) {
            const std::string& merge = v.as_string();
            size_t space = merge.find(' ', 1);
            if (space == std::string::npos || space + 1 >= merge.size())
                fail("expected \"left right\", got \"{}\"", merge);
            data.merges.push_back(merge);
        });

        auto id = [&](const char* key, int32_t& out) {
            if (keys.find(key)) out = keys.scalar(key, to_id);
        };
        id("bos_token_id", data.bos_id);
        id("eos_token_id", data.eos_id);
        id("unknown_token_id", data.unk_id);
        id("padding_token_id", data.pad_id);
        // Defaults as the converters assume them when the key is absent: SentencePiece adds BOS and a space.
        data.add_bos = spm;
        data.add_space_prefix = spm;
        auto flag = [&](const char* key, bool& out) {
            if (keys.find(key)) out = keys.scalar(key, [](const GgufValue& v) { return v.as_bool(); });
        };
        flag("add_bos_token", data.add_bos);
        flag("add_space_prefix", data.add_space_prefix);
        return Tokenizer(std::move(data));
    });
}

}  // namespace mk

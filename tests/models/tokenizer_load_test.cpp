// Tokenizer loading: HF tokenizer.json written by write_hf_tokenizer_json and read back (real vocabularies),
// and the errors from_gguf / from_hf_json give for bad input, naming the file and the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/gguf.hpp"
#include "models/gguf_writer.hpp"
#include "models/pretokenizer.hpp"
#include "models/tokenizer.hpp"
#include "tests/test_data.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

fs::path fresh_dir(const std::string& name) {
    fs::path dir = mk::test::output_dir() / "tokenizer_load" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

fs::path vocab_path(const std::string& name) { return mk::test::real_data_dir() / name; }

// Ends the test case as skipped when a real vocabulary (tools/setup.sh --test) is absent.
#define SKIP_WITHOUT_VOCAB(name) MK_SKIP_IF_MISSING(vocab_path(name), mk::test::kFetchRealData)

mk::Tokenizer load_vocab(const std::string& name) {
    return mk::Tokenizer::from_gguf(mk::GgufFile::open(vocab_path(name)));
}

std::vector<std::string> vocab_inputs(const std::string& name) {
    std::ifstream in(vocab_path(name + ".inp"), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    std::string all = s.str(), sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0, next; (next = all.find(sep, pos)) != std::string::npos; pos = next + sep.size())
        texts.push_back(all.substr(pos, next - pos));
    texts.push_back("<|endoftext|> and <fim_prefix> specials");
    return texts;
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// A GGUF image holding a tiny byte-level tokenizer with the given merges and pre-tokenizer name.
std::vector<uint8_t> tiny_gguf(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
    mk::GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", pre);
    w.add_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
    w.add_i32s("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 1, 3});
    w.add_strings("tokenizer.ggml.merges", merges);
    w.add_u32("tokenizer.ggml.eos_token_id", 3);
    return w.to_bytes();
}

}  // namespace

TEST_CASE("byte-level tokenizer.json round-trips a real vocabulary", "[cpu][tokenizer]") {
    SKIP_WITHOUT_VOCAB("ggml-vocab-starcoder.gguf");
    mk::Tokenizer original = load_vocab("ggml-vocab-starcoder.gguf");
    fs::path dir = fresh_dir("starcoder");
    mk::write_hf_tokenizer_json(original.data(), dir / "tokenizer.json");
    REQUIRE(fs::exists(dir / "tokenizer_config.json"));
    mk::Tokenizer back = mk::Tokenizer::from_hf_json(dir / "tokenizer.json");
    const mk::TokenizerData &a = original.data(), &b = back.data();
    CHECK(b.kind == a.kind);
    CHECK(b.pre == "smollm");       // starcoder's canonical name
    CHECK((b.tokens == a.tokens));  // parenthesized: no 49k-element printout
    CHECK((b.types == a.types));    // parenthesized: no 49k-element printout
    CHECK((b.merges == a.merges));  // parenthesized: no 49k-element printout
    CHECK(b.bos_id == a.bos_id);
    CHECK(b.eos_id == a.eos_id);
    CHECK(b.unk_id == a.unk_id);
    CHECK(b.pad_id == a.pad_id);
    CHECK(b.add_bos == a.add_bos);
    CHECK(b.eog_ids == a.eog_ids);
    for (const std::string& text : vocab_inputs("ggml-vocab-starcoder.gguf")) {
        INFO(text);
        CHECK(back.encode(text) == original.encode(text));
    }
}

TEST_CASE("SentencePiece tokenizer.json round-trips through derived merges", "[cpu][tokenizer]") {
    SKIP_WITHOUT_VOCAB("ggml-vocab-llama-spm.gguf");
    mk::Tokenizer original = load_vocab("ggml-vocab-llama-spm.gguf");
    fs::path dir = fresh_dir("llama-spm");
    mk::write_hf_tokenizer_json(original.data(), dir / "tokenizer.json");
    mk::Tokenizer back = mk::Tokenizer::from_hf_json(dir / "tokenizer.json");
    CHECK(back.data().kind == mk::TokenizerKind::sentencepiece_bpe);
    CHECK((back.data().tokens == original.data().tokens));
    CHECK((back.data().types == original.data().types));
    CHECK(back.data().add_bos);
    CHECK(back.data().add_space_prefix);
    CHECK(back.data().bos_id == 1);
    CHECK(back.data().eos_id == 2);
    for (const std::string& text : vocab_inputs("ggml-vocab-llama-spm.gguf")) {
        INFO(text);
        CHECK(back.encode(text) == original.encode(text));
    }
}

TEST_CASE("tokenizer.json with a Llama 3 split and user-defined tokens", "[cpu][tokenizer]") {
    mk::TokenizerData data;
    data.pre = "llama-bpe";
    data.tokens = {"a", "b", "ab", "Ġ", "<|begin_of_text|>", "<|eot_id|>", "<think>"};
    data.types = {mk::TokenType::normal,  mk::TokenType::normal,  mk::TokenType::normal,      mk::TokenType::normal,
                  mk::TokenType::control, mk::TokenType::control, mk::TokenType::user_defined};
    data.merges = {"a b"};
    data.bos_id = 4;
    data.eos_id = 5;
    data.add_bos = true;
    fs::path dir = fresh_dir("llama3");
    write_text(dir / "tokenizer_config.json", R"({"chat_template": "kept", "eos_token": "stale"})");
    mk::write_hf_tokenizer_json(data, dir / "tokenizer.json");
    mk::Tokenizer back = mk::Tokenizer::from_hf_json(dir / "tokenizer.json");
    CHECK(back.data().pre == "llama-bpe");
    CHECK(back.data().types == data.types);
    CHECK(back.data().bos_id == 4);
    CHECK(back.data().eos_id == 5);
    CHECK(back.data().add_bos);
    CHECK(back.encode("ab <think>") == std::vector<int32_t>{4, 2, 3, 6});
    CHECK(back.encode("<|begin_of_text|>ab") == std::vector<int32_t>{4, 2});
    CHECK(back.is_eog(5));
    std::ifstream config(dir / "tokenizer_config.json");
    nlohmann::json c = nlohmann::json::parse(config);
    CHECK(c["chat_template"] == "kept");  // merged into, not replaced
    CHECK(c["eos_token"] == "<|eot_id|>");
}

TEST_CASE("tokenizer.json in the shape of Llama 3's, without tokenizer_config.json", "[cpu][tokenizer]") {
    using nlohmann::json;
    json j;
    j["added_tokens"] = {{{"id", 3}, {"content", "<|begin_of_text|>"}, {"special", true}}};
    j["model"] = {{"type", "BPE"},
                  {"ignore_merges", true},
                  {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"<|begin_of_text|>", 3}}},
                  {"merges", json::array({json::array({"a", "b"})})}};
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", mk::kLlama3Pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    j["post_processor"] = {{"type", "Sequence"},
                           {"processors",
                            {{{"type", "ByteLevel"}},
                             {{"type", "TemplateProcessing"}, {"single", {bos, {{"Sequence", {{"id", "A"}}}}}}}}}};
    j["decoder"] = {{"type", "ByteLevel"}};
    fs::path dir = fresh_dir("llama3-shape");
    write_text(dir / "tokenizer.json", j.dump());
    mk::Tokenizer tok = mk::Tokenizer::from_hf_json(dir / "tokenizer.json");
    CHECK(tok.data().pre == "llama-bpe");
    CHECK(tok.data().bos_id == 3);
    CHECK(tok.data().add_bos);
    CHECK(tok.encode("ab") == std::vector<int32_t>{3, 2});
}

TEST_CASE("from_hf_json errors name the file and the field", "[cpu][tokenizer]") {
    fs::path dir = fresh_dir("errors");
    fs::path path = dir / "tokenizer.json";
    write_text(path, R"({"model": {"type": "WordPiece", "vocab": {}}})");
    CHECK_THROWS_WITH(mk::Tokenizer::from_hf_json(path), Contains("tokenizer.json") && Contains("WordPiece"));
    write_text(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "ab"]},
                        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})");
    CHECK_THROWS_WITH(mk::Tokenizer::from_hf_json(path), Contains("tokenizer.json") && Contains("model.merges[1]"));
    write_text(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                          {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": false},
                          {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}})");
    CHECK_THROWS_WITH(mk::Tokenizer::from_hf_json(path), Contains("unsupported split pattern") && Contains("\\w+"));
    write_text(path, "{ not json");
    CHECK_THROWS_WITH(mk::Tokenizer::from_hf_json(path), Contains("invalid JSON"));
    CHECK_THROWS_WITH(mk::Tokenizer::from_hf_json(dir / "missing.json"), Contains("missing.json"));
}

TEST_CASE("from_gguf reads a tiny vocabulary and names bad keys", "[cpu][tokenizer]") {
    std::vector<uint8_t> good = tiny_gguf({"a b"});
    mk::Tokenizer tok = mk::Tokenizer::from_gguf(mk::GgufFile::parse(good.data(), good.size(), "vocab.gguf"));
    CHECK(tok.encode("abab<|endoftext|>") == std::vector<int32_t>{2, 2, 3});
    CHECK(tok.is_eog(3));

    std::vector<uint8_t> bad = tiny_gguf({"a b", "ab"});
    CHECK_THROWS_WITH(mk::Tokenizer::from_gguf(mk::GgufFile::parse(bad.data(), bad.size(), "vocab.gguf")),
                      Contains("vocab.gguf: tokenizer.ggml.merges[1]: expected \"left right\""));
    std::vector<uint8_t> missing = tiny_gguf({"a c"});
    CHECK_THROWS_WITH(mk::Tokenizer::from_gguf(mk::GgufFile::parse(missing.data(), missing.size(), "vocab.gguf")),
                      Contains("vocab.gguf") && Contains("merges[0]") && Contains("\"c\" is not in the vocabulary"));
    std::vector<uint8_t> pre = tiny_gguf({"a b"}, "mystery-pre");
    CHECK_THROWS_WITH(mk::Tokenizer::from_gguf(mk::GgufFile::parse(pre.data(), pre.size(), "vocab.gguf")),
                      Contains("vocab.gguf") && Contains("mystery-pre"));
}

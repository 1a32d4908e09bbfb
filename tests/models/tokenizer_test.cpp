// Tokenizer tests against real data: llama.cpp's published vocabularies and HF-made id vectors (fetched by
// tools/setup.sh --test), the SmolLM2 model's own vocabulary, and the HF `tokenizers` oracle of the test run.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/pretokenizer.hpp"
#include "models/tokenizer.hpp"
#include "tests/test_data.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

struct VocabCase {
    std::string text;
    std::vector<int32_t> ids;
};

// <vocab>.inp: inputs separated by "\n__ggml_vocab_test__\n"; <vocab>.out: one line of ids per input.
std::vector<VocabCase> read_vocab_cases(const fs::path& vocab) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::string inp = read_file(vocab.string() + ".inp");
    std::istringstream out(read_file(vocab.string() + ".out"));
    std::vector<VocabCase> cases;
    for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
        VocabCase c{inp.substr(pos, next - pos), {}};
        std::string line;
        REQUIRE(std::getline(out, line));
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    REQUIRE(cases.size() > 40);
    return cases;
}

mk::Tokenizer load_gguf(const fs::path& path) { return mk::Tokenizer::from_gguf(mk::GgufFile::open(path)); }

fs::path vocab_path(const std::string& name) { return mk::test::real_data_dir() / ("ggml-vocab-" + name + ".gguf"); }

// The published vectors carry no BOS; llama-spm's file asks for one, so compare a BOS-less copy.
mk::Tokenizer without_bos(const mk::Tokenizer& tok) {
    mk::TokenizerData data = tok.data();
    data.add_bos = false;
    return mk::Tokenizer(std::move(data));
}

// Ends the test case as skipped when a real vocabulary (tools/setup.sh --test) or the model is absent.
#define SKIP_WITHOUT_VOCAB(name) MK_SKIP_IF_MISSING(vocab_path(name), mk::test::kFetchRealData)
#define SKIP_WITHOUT_MODEL() MK_SKIP_IF_MISSING(mk::test::default_model_path(), "./tools/setup.sh")

const mk::Tokenizer& smollm2() {
    static const mk::Tokenizer tok = load_gguf(mk::test::default_model_path());
    return tok;
}

}  // namespace

// Every vocabulary of the set that ships reference ids and whose tokenizer mk supports: byte-level BPE with
// the gpt-2, smollm (starcoder, refact), llama-bpe (Llama 3) and qwen2 splits, and SentencePiece BPE.
TEST_CASE("real vocabularies reproduce their reference token ids exactly", "[cpu][tokenizer]") {
    auto name = GENERATE(as<std::string>{}, "gpt-2", "starcoder", "refact", "llama-bpe", "qwen2", "llama-spm", "phi-3");
    SKIP_WITHOUT_VOCAB(name);
    fs::path path = vocab_path(name);
    mk::Tokenizer tok = without_bos(load_gguf(path));
    int mismatches = 0;
    for (const VocabCase& c : read_vocab_cases(path)) {
        INFO(name << ": \"" << c.text << "\"");
        std::vector<int32_t> got = tok.encode(c.text, false);
        CHECK(got == c.ids);
        mismatches += got != c.ids;
        CHECK(tok.encode(c.text, true) == c.ids);  // no special-token text in these inputs
        CHECK(tok.decode(got) == c.text);          // both kinds are lossless on valid UTF-8
    }
    CHECK(mismatches == 0);
}

// The rest of the set with reference ids: mk refuses each with a one-line reason naming the file and key
// (BERT WordPiece, Gemma 4 and T5 tokenizers; pre-tokenizer splits mk does not implement).
TEST_CASE("unsupported real vocabularies are refused with the reason", "[cpu][tokenizer]") {
    const std::vector<std::pair<std::string, std::string>> refused{
        {"bert-bge", "unsupported tokenizer 'bert'"},        {"gemma-4", "unsupported tokenizer 'gemma4'"},
        {"nomic-bert-moe", "unsupported tokenizer 't5'"},    {"command-r", "unknown pre-tokenizer 'command-r'"},
        {"deepseek-coder", "unknown pre-tokenizer 'deepseek-coder'"},
        {"deepseek-llm", "unknown pre-tokenizer 'deepseek-llm'"}, {"falcon", "unknown pre-tokenizer 'falcon'"},
        {"mpt", "unknown pre-tokenizer 'mpt'"},              {"qwen35", "unknown pre-tokenizer 'qwen35'"}};
    for (const auto& [name, reason] : refused) SKIP_WITHOUT_VOCAB(name);
    for (const auto& [name, reason] : refused) {
        INFO(name);
        CHECK_THROWS_WITH(load_gguf(vocab_path(name)), Contains("ggml-vocab-" + name + ".gguf") && Contains(reason));
    }
}

TEST_CASE("llama-spm adds BOS once, as its file asks", "[cpu][tokenizer]") {
    SKIP_WITHOUT_VOCAB("llama-spm");
    mk::Tokenizer tok = load_gguf(vocab_path("llama-spm"));
    REQUIRE(tok.data().add_bos);
    CHECK(tok.encode("Hello") == std::vector<int32_t>{1, 15043});
    CHECK(tok.encode("<s>Hello") == std::vector<int32_t>{1, 15043});  // the text's own BOS is not doubled
    CHECK(tok.encode("") == std::vector<int32_t>{1});
    CHECK(tok.decode(tok.encode("  two spaces")) == "  two spaces");
    CHECK(tok.is_eog(2));
    CHECK_FALSE(tok.is_eog(1));
}

TEST_CASE("pre-tokenizers split as HF tokenizers does", "[cpu][tokenizer]") {
    // Expected pieces printed by HF tokenizers 0.23 (ByteLevel / Digits / Split(Regex, "isolated")).
    using Pieces = std::vector<std::string_view>;
    const std::string mixed = "I'M  fine\tok 12345 x\r\n\r\ny";
    mk::PreTokenizer gpt2("gpt-2"), smollm("smollm"), llama3("llama-bpe"), qwen2("qwen2");
    CHECK(gpt2.split("Hello world! 123") == Pieces{"Hello", " world", "!", " 123"});
    CHECK(gpt2.split("a   b\n\n  c  ") == Pieces{"a", "  ", " b", "\n\n ", " c", "  "});
    CHECK(gpt2.split(mixed) == Pieces{"I", "'", "M", " ", " fine", "\t", "ok", " 12345", " x", "\r\n\r", "\n", "y"});
    CHECK(smollm.split("Hello world! 123") == Pieces{"Hello", " world", "!", " ", "1", "2", "3"});
    CHECK(smollm.split("héllo wörld 😀😀 ١٢٣") == Pieces{"héllo", " wörld", " 😀😀", " ", "١", "٢", "٣"});
    CHECK(llama3.split("a   b\n\n  c  ") == Pieces{"a", "  ", " b", "\n\n", " ", " c", "  "});
    CHECK(llama3.split(mixed) == Pieces{"I", "'M", " ", " fine", "\tok", " ", "123", "45", " x", "\r\n\r\n", "y"});
    CHECK(qwen2.split(mixed) ==
          Pieces{"I", "'M", " ", " fine", "\tok", " ", "1", "2", "3", "4", "5", " x", "\r\n\r\n", "y"});
    CHECK(mk::PreTokenizer("starcoder").canonical_name() == "smollm");
    CHECK(gpt2.split("").empty());
    // Invalid UTF-8 is never matched: it stays in a gap piece and the pieces still cover the text.
    CHECK(gpt2.split("ab\xFF\xFE cd") == Pieces{"ab", "\xFF\xFE", " cd"});
    CHECK_THROWS_WITH(mk::PreTokenizer("no-such-pre"), Contains("no-such-pre") && Contains("tokenizer.ggml.pre"));
}

TEST_CASE("special tokens are matched longest first, only when asked", "[cpu][tokenizer]") {
    SKIP_WITHOUT_VOCAB("starcoder");
    mk::Tokenizer tok = load_gguf(vocab_path("starcoder"));
    REQUIRE(tok.find_token("<|endoftext|>") == 0);
    CHECK(tok.encode("<|endoftext|>") == std::vector<int32_t>{0});
    std::vector<int32_t> plain = tok.encode("<|endoftext|>", false);
    CHECK(plain.size() > 1);
    CHECK(tok.decode(plain) == "<|endoftext|>");
    std::vector<int32_t> want = tok.encode("a", false);
    want.push_back(1);  // <fim_prefix>
    for (int32_t id : tok.encode("b c", false)) want.push_back(id);
    want.push_back(2);  // <fim_middle>
    CHECK(tok.encode("a<fim_prefix>b c<fim_middle>") == want);
    CHECK(tok.token_bytes(0).empty());  // control tokens decode to nothing
    CHECK(tok.decode(std::vector<int32_t>{0, 1}).empty());
    CHECK(tok.is_eog(0));
    CHECK_THROWS_AS(tok.token_bytes(49152), mk::Error);
}

TEST_CASE("StreamDecoder holds back split UTF-8 and replaces invalid bytes", "[cpu][tokenizer]") {
    SKIP_WITHOUT_VOCAB("gpt-2");
    mk::Tokenizer tok = load_gguf(vocab_path("gpt-2"));
    const std::string text = "🦙 llama, café, 東京";
    std::vector<int32_t> ids = tok.encode(text);
    mk::StreamDecoder stream(tok);
    std::string out;
    int held = 0;
    for (int32_t id : ids) {
        std::string piece = stream.push(id);
        held += piece.empty();
        out += piece;
    }
    out += stream.flush();
    CHECK(out == text);
    CHECK(held > 0);  // the llama emoji is spread over byte tokens

    // GPT-2 maps byte 0xF0 to the character "ð": a lone lead byte of a 4-byte sequence.
    int32_t lead = tok.find_token("ð");
    REQUIRE(lead >= 0);
    CHECK(stream.push(lead).empty());
    CHECK(stream.flush() == "\xEF\xBF\xBD");
    CHECK(stream.push(lead).empty());
    CHECK(stream.push(tok.find_token("A")) ==
          "\xEF\xBF\xBD"
          "A");  // cannot complete: replaced at once
    CHECK(stream.flush().empty());
    CHECK(tok.decode(std::vector<int32_t>{lead}) == "\xEF\xBF\xBD");
    CHECK(tok.token_bytes(lead) == "\xF0");
}

TEST_CASE("SmolLM2 tokenizer matches published ids", "[model][tokenizer]") {
    SKIP_WITHOUT_MODEL();
    const mk::Tokenizer& tok = smollm2();
    CHECK(tok.vocab_size() == 49152);
    CHECK(tok.data().pre == "smollm");
    CHECK_FALSE(tok.data().add_bos);
    CHECK(tok.encode("The capital of France is") == std::vector<int32_t>{504, 3575, 282, 4649, 314});
    CHECK(tok.encode("Hello world! 123") == std::vector<int32_t>{19556, 905, 17, 216, 33, 34, 35});
    CHECK(tok.encode("Hello, we can use") == std::vector<int32_t>{19556, 28, 392, 416, 722});
}

TEST_CASE("SmolLM2 special tokens and end of generation", "[model][tokenizer]") {
    SKIP_WITHOUT_MODEL();
    const mk::Tokenizer& tok = smollm2();
    CHECK(tok.data().tokens[4] == "<reponame>");  // a code-model repository marker, not an end of turn
    CHECK(tok.is_eog(0));                         // <|endoftext|>
    CHECK(tok.is_eog(2));                         // <|im_end|>, the eos
    CHECK_FALSE(tok.is_eog(1));
    CHECK_FALSE(tok.is_eog(4));
    CHECK(tok.data().eog_ids == std::vector<int32_t>{0, 2});

    std::vector<int32_t> ids = tok.encode("<|im_start|>user\nHi<|im_end|>");
    std::vector<int32_t> want{1};
    for (int32_t id : tok.encode("user\nHi")) want.push_back(id);
    want.push_back(2);
    CHECK(ids == want);
    CHECK(tok.encode("<|im_start|>", false).size() > 1);
}

TEST_CASE("SmolLM2 decode inverts encode", "[model][tokenizer]") {
    SKIP_WITHOUT_MODEL();
    const mk::Tokenizer& tok = smollm2();
    auto text = GENERATE(as<std::string>{}, "plain ASCII, with punctuation!?", "accents: àéîõü ÀÉÎÕÜ ñ ç ß",
                         "emoji 😀🎉 👍🏽 🇫🇷 🦙", "中文 日本語 한국어",
                         "   leading\t\ttabs\n\n\ntrailing   ", "\r\n \n\t mixed whitespace \u00a0\u2009 ", "");
    CHECK(tok.decode(tok.encode(text)) == text);
}

TEST_CASE("SmolLM2 streams an emoji split across byte tokens", "[model][tokenizer]") {
    SKIP_WITHOUT_MODEL();
    const mk::Tokenizer& tok = smollm2();
    std::vector<int32_t> ids = tok.encode("🦙");
    REQUIRE(ids.size() > 1);
    mk::StreamDecoder stream(tok);
    for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK(stream.push(ids[i]).empty());
    CHECK(stream.push(ids.back()) == "🦙");
    CHECK(stream.flush().empty());
}

TEST_CASE("SmolLM2 matches the HF tokenizers oracle", "[model][tokenizer][oracle]") {
    SKIP_WITHOUT_MODEL();
    fs::path path = mk::test::output_dir() / "tokenizer_oracle.json";
    INFO("written by tests/reference/tokenizer_oracle.py (CTest fixture oracle_tokenizer)");
    REQUIRE(fs::exists(path));
    nlohmann::json oracle = nlohmann::json::parse(read_file(path));
    REQUIRE(oracle.at("cases").size() > 0);
    const mk::Tokenizer& tok = smollm2();
    for (const auto& c : oracle.at("cases")) {
        std::string text = c.at("text").get<std::string>();
        INFO("\"" << text << "\"");
        CHECK(tok.encode(text) == c.at("ids").get<std::vector<int32_t>>());
    }
}

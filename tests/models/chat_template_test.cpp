// Chat template tests: family detection and rendering on real templates (Llama 3.1, Qwen2.5, Qwen3 and
// SmolLM2's own). Expected prompts were produced once by rendering each real template with Python
// jinja2 3.1.6 as HF transformers does (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True),
// bos_token="<|begin_of_text|>") and pasted here.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "models/chat_template.hpp"
#include "models/gguf.hpp"
#include "tests/test_data.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

using Catch::Matchers::Contains;
using mk::ChatFamily;
using mk::ChatMessage;
using Messages = std::vector<ChatMessage>;

namespace {

std::filesystem::path template_path(const std::string& file) { return mk::test::real_data_dir() / "templates" / file; }

// Ends the test case as skipped when a real template (tools/setup.sh --test) is absent.
#define SKIP_WITHOUT_TEMPLATE(file) MK_SKIP_IF_MISSING(template_path(file), mk::test::kFetchRealData)

mk::ChatTemplate real_template(const std::string& file) {
    std::ifstream in(template_path(file), std::ios::binary);
    REQUIRE(in);
    std::stringstream s;
    s << in.rdbuf();
    return mk::ChatTemplate::parse(s.str());
}

const Messages kSingle{{"user", "Hi"}};
const Messages kMulti{{"system", "Be brief."}, {"user", "What is 2+2?"}, {"assistant", "4"}, {"user", " And 3+3? \n"}};
const Messages kThink{{"user", "Q1"}, {"assistant", "<think>\nhmm\n</think>\n\nA1"}, {"user", "Q2"}};
const Messages kThinkLast{{"user", "Q1"}, {"assistant", "<think>\nwhy\n</think>\n\nA1"}};

}  // namespace

TEST_CASE("chat families are detected from real templates", "[cpu][chat]") {
    for (const char* file : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja"})
        SKIP_WITHOUT_TEMPLATE(file);
    CHECK(real_template("meta-llama-Llama-3.1-8B-Instruct.jinja").family() == ChatFamily::llama3);
    CHECK(real_template("Qwen-Qwen2.5-7B-Instruct.jinja").family() == ChatFamily::chatml);
    CHECK(real_template("Qwen-Qwen3-0.6B.jinja").family() == ChatFamily::chatml);
    CHECK(real_template("Qwen-Qwen2.5-7B-Instruct.jinja").default_system() ==
          "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    CHECK(real_template("Qwen-Qwen3-0.6B.jinja").default_system().empty());
    CHECK_THROWS_WITH(mk::detect_chat_family("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}"),
                      Contains("Gemma") && Contains("<start_of_turn>"));
    CHECK_THROWS_WITH(mk::detect_chat_family("{{ messages }}"),
                      Contains("neither ChatML") && Contains("{{ messages }}"));
}

TEST_CASE("Llama 3.1 prompts match its Jinja template", "[cpu][chat]") {
    SKIP_WITHOUT_TEMPLATE("meta-llama-Llama-3.1-8B-Instruct.jinja");
    mk::ChatTemplate t = real_template("meta-llama-Llama-3.1-8B-Instruct.jinja");
    CHECK(t.render(kSingle) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
          "Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
          "assistant<|end_header_id|>\n\n");
    CHECK(t.render(kSingle, false) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
          "Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    CHECK(t.render(kMulti) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
          "Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
          "2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_"
          "header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(t.render(kThink) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
          "Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ1<|eot_id|><|start_header_id|>"
          "assistant<|end_header_id|>\n\n<think>\nhmm\n</think>\n\nA1<|eot_id|><|start_header_id|>user<|end_header_id|>"
          "\n\nQ2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("Qwen2.5 prompts match its Jinja template", "[cpu][chat]") {
    SKIP_WITHOUT_TEMPLATE("Qwen-Qwen2.5-7B-Instruct.jinja");
    mk::ChatTemplate t = real_template("Qwen-Qwen2.5-7B-Instruct.jinja");
    CHECK(t.render(kSingle) ==
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_"
          "start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK(t.render(kMulti, false) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is "
          "2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n And 3+3? \n<|im_end|>\n");
    CHECK(t.render(kThink) ==
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_"
          "start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nA1<|im_end|>\n<|im_start|>user\n"
          "Q2<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("Qwen3 prompts match its Jinja template", "[cpu][chat]") {
    SKIP_WITHOUT_TEMPLATE("Qwen-Qwen3-0.6B.jinja");
    mk::ChatTemplate t = real_template("Qwen-Qwen3-0.6B.jinja");
    CHECK(t.render(kSingle) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK(t.render(kMulti) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is "
          "2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n And 3+3? "
          "\n<|im_end|>\n<|im_start|>assistant\n");
    // History drops the reasoning; an assistant turn after the last user message keeps it.
    CHECK(t.render(kThink) ==
          "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_"
          "start|>assistant\n");
    CHECK(t.render(kThinkLast, false) ==
          "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\nA1<|im_end|>\n");
}

TEST_CASE("SmolLM2's own template is ChatML with its default system prompt", "[model][chat]") {
    MK_SKIP_IF_MISSING(mk::test::default_model_path(), "./tools/setup.sh");
    mk::GgufFile file = mk::GgufFile::open(mk::test::default_model_path());
    std::string text = file.get("tokenizer.chat_template").as_string();
    CHECK(mk::detect_chat_family(text) == ChatFamily::chatml);
    mk::ChatTemplate t = mk::ChatTemplate::from_gguf(file);
    CHECK(t.family() == ChatFamily::chatml);
    CHECK(t.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    CHECK(t.render(kSingle) ==
          "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK(t.render(kMulti) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is "
          "2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n And 3+3? "
          "\n<|im_end|>\n<|im_start|>assistant\n");
    CHECK(
        t.render(kThink, false) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nA1<|im_end|>"
        "\n<|im_start|>user\nQ2<|im_end|>\n");
}

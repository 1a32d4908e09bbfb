// HF tokenizer.json (BPE model) read and write, with the special tokens of tokenizer_config.json beside it.
// Byte-level BPE round-trips exactly; SentencePiece is written with merges derived from the scores.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/error.hpp"
#include "models/tokenizer_impl.hpp"

namespace mk {
namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path.string());
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        fail("{}: invalid JSON: {}", path.string(), e.what());
    }
}

// True when `node` or a step of a Sequence in it has "type": type.
bool has_step(const json& node, std::string_view type) {
    if (!node.is_object()) return false;
    if (node.value("type", "") == type) return true;
    for (const char* list : {"pretokenizers", "decoders", "normalizers"})
        if (auto it = node.find(list); it != node.end() && it->is_array())
            for (const json& step : *it)
                if (has_step(step, type)) return true;
    return false;
}

std::vector<json> steps_of(const json& node) {
    if (node.value("type", "") == "Sequence") return node.at("pretokenizers").get<std::vector<json>>();
    return {node};
}

// The pre-tokenizer name for a byte-level pre_tokenizer: ByteLevel with its own regex, optionally after
// Digits / Split(\p{N}), or Split(known pattern) followed by ByteLevel without regex.
std::string byte_level_pre(const json& pre) {
    if (!pre.is_object()) fail("pre_tokenizer: missing (byte-level BPE needs ByteLevel)");
    bool digits = false, byte_level = false, byte_regex = true;
    std::string pattern;
    for (const json& step : steps_of(pre)) {
        std::string type = step.value("type", "");
        if (type == "Digits" && step.value("individual_digits", false)) {
            digits = true;
        } else if (type == "Split" && step.value("behavior", "") == "Isolated" && !step.value("invert", false)) {
            const json& p = step.at("pattern");
            std::string regex = p.contains("Regex") ? p.at("Regex").get<std::string>() : p.value("String", "");
            if (regex == kDigitPattern)
                digits = true;
            else
                pattern = regex;
        } else if (type == "ByteLevel") {
            if (step.value("add_prefix_space", false))
                fail("pre_tokenizer: ByteLevel add_prefix_space is not supported");
            byte_level = true;
            byte_regex = step.value("use_regex", true);
        } else {
            fail("pre_tokenizer: unsupported step {}", step.dump());
        }
    }
    if (!byte_level) fail("pre_tokenizer: no ByteLevel step in {}", pre.dump());
    if (byte_regex && pattern.empty()) return digits ? "smollm" : "gpt-2";
    if (!byte_regex && !digits)
        if (std::string name = pretokenizer_name_for_pattern(pattern); !name.empty()) return name;
    fail("pre_tokenizer: unsupported split pattern '{}'{}", pattern, digits ? " after a digit split" : "");
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::string special_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object()) return v.value("content", "");
    return "";
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::filesystem::path& path) {
    const std::string name = path.string();
    json j = read_json(path);
    try {
        return with_context(name, [&] {
            TokenizerData data;
            const json& model = j.at("model");
            if (std::string type = model.value("type", "BPE"); type != "BPE")
                fail("model.type: unsupported '{}' (mk reads BPE)", type);
            const json& vocab = model.at("vocab");
            const json added = j.value("added_tokens", json::array());
            int64_t n = 0;
            for (const auto& [text, id] : vocab.items()) n = std::max(n, id.get<int64_t>() + 1);
            for (const json& t : added) n = std::max(n, t.at("id").get<int64_t>() + 1);
            if (static_cast<size_t>(n) > vocab.size() + added.size())
                fail("token ids are not dense: the largest is {} for {} tokens", n - 1, vocab.size() + added.size());
            data.tokens.resize(n);
            data.types.assign(n, TokenType::normal);
            std::vector<uint8_t> seen(n);
            for (const auto& [text, id] : vocab.items()) {
                if (id.get<int64_t>() < 0) fail("model.vocab: '{}' has negative id {}", text, id.dump());
                data.tokens[id.get<int64_t>()] = text;
                seen[id.get<int64_t>()] = 1;
            }
            for (const json& t : added) {
                int64_t id = t.at("id").get<int64_t>();
                if (id < 0) fail("added_tokens: '{}' has negative id {}", t.dump(), id);
                data.tokens[id] = t.at("content").get<std::string>();
                data.types[id] = t.value("special", false) ? TokenType::control : TokenType::user_defined;
                seen[id] = 1;
            }
            if (auto hole = std::find(seen.begin(), seen.end(), 0); hole != seen.end())
                fail("token id {} is in neither model.vocab nor added_tokens", hole - seen.begin());
            TokenMap ids;
            for (int64_t id = 0; id < n; ++id) ids.emplace(data.tokens[id], static_cast<int32_t>(id));
            auto id_of = [&](const std::string& text, const char* what) {
                auto it = ids.find(text);
                if (it == ids.end()) fail("{} '{}' is not in the vocabulary", what, text);
                return it->second;
            };

            const json null;
            const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : null;
            const json& decoder = j.contains("decoder") ? j["decoder"] : null;
            const json& normalizer = j.contains("normalizer") ? j["normalizer"] : null;
            bool byte_fallback = model.value("byte_fallback", false);
            if (has_step(pre, "ByteLevel") || has_step(decoder, "ByteLevel")) {
                data.kind = TokenizerKind::byte_bpe;
                data.pre = byte_level_pre(pre);
            } else if (byte_fallback || has_step(pre, "Metaspace") || has_step(decoder, "Metaspace") ||
                       has_step(normalizer, "Prepend") || has_step(decoder, "ByteFallback")) {
                data.kind = TokenizerKind::sentencepiece_bpe;
            } else {
                fail("neither a ByteLevel nor a SentencePiece (Metaspace, ▁) tokenizer");
            }

            const json& merges = model.at("merges");
            if (!merges.is_array()) fail("model.merges: expected an array, got {}", merges.type_name());
            for (size_t i = 0; i < merges.size(); ++i) {
                const json& m = merges[i];
                std::string merge;
                if (m.is_string())
                    merge = m.get<std::string>();
                else if (m.is_array() && m.size() == 2 && m[0].get<std::string>().find(' ') == std::string::npos)
                    merge = m[0].get<std::string>() + " " + m[1].get<std::string>();
                size_t space = merge.find(' ', 1);
                if (space == std::string::npos || space + 1 >= merge.size())
                    fail("model.merges[{}]: expected \"left right\" or [left, right], got {}", i, m.dump());
                data.merges.push_back(std::move(merge));
            }

            if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string())
                data.unk_id = id_of(unk->get<std::string>(), "model.unk_token");
            if (data.kind == TokenizerKind::sentencepiece_bpe) {
                if (byte_fallback)
                    for (int b = 0; b < 256; ++b)
                        if (auto it = ids.find(fmt::format("<0x{:02X}>", b)); it != ids.end())
                            data.types[it->second] = TokenType::byte;
                // Scores from merge ranks: the earlier a merge, the higher its result's score. Tokens
                // no merge makes only matter as single characters, where the score is never used.
                data.scores.assign(n, -1e9f);
                for (size_t rank = data.merges.size(); rank-- > 0;) {
                    std::string joined = data.merges[rank];
                    joined.erase(joined.find(' ', 1), 1);
                    if (auto it = ids.find(joined); it != ids.end())
                        data.scores[it->second] = -static_cast<float>(rank);
                }
                data.merges.clear();
                data.add_space_prefix = has_step(normalizer, "Prepend");
                for (const json& step : steps_of(pre.is_object() ? pre : json::object()))
                    if (step.value("type", "") == "Metaspace")
                        data.add_space_prefix =
                            step.value("prepend_scheme", "always") != "never" && step.value("add_prefix_space", true);
            }

            // BOS added by the post-processor template: {"single": [{"SpecialToken": {"id": "<s>"}}, ...]},
            // alone or as a step of a Sequence (Llama 3: ByteLevel, then TemplateProcessing).
            const json& post = j.contains("post_processor") ? j["post_processor"] : null;
            std::vector<json> processors{post};
            if (post.is_object() && post.value("type", "") == "Sequence")
                processors = post.at("processors").get<std::vector<json>>();
            for (const json& p : processors) {
                if (!p.is_object() || p.value("type", "") != "TemplateProcessing") continue;
                const json& single = p.at("single");
                if (!single.empty() && single[0].contains("SpecialToken")) {
                    data.bos_id = id_of(single[0]["SpecialToken"].at("id").get<std::string>(), "post_processor BOS");
                    data.add_bos = true;
                }
            }
            std::filesystem::path config_path = path.parent_path() / "tokenizer_config.json";
            if (std::filesystem::exists(config_path)) {
                json config = read_json(config_path);
                with_context(config_path.filename().string(), [&] {
                    auto special = [&](const char* key, int32_t& out) {
                        if (auto it = config.find(key); it != config.end()) {
                            std::string text = special_text(*it);
                            out = text.empty() ? -1 : id_of(text, key);
                        }
                    };
                    special("bos_token", data.bos_id);
                    special("eos_token", data.eos_id);
                    special("unk_token", data.unk_id);
                    special("pad_token", data.pad_id);
                    if (auto it = config.find("add_bos_token"); it != config.end() && it->is_boolean())
                        data.add_bos = it->get<bool>();
                });
            }
            // HF has no "unknown" type; a dedicated unk token (<unk>) gets it back, a shared one
            // (StarCoder's <|endoftext|> is bos, eos and unk) stays control.
            if (data.unk_id >= 0 && data.unk_id != data.bos_id && data.unk_id != data.eos_id &&
                data.unk_id != data.pad_id)
                data.types[data.unk_id] = TokenType::unknown;
            return Tokenizer(std::move(data));
        });
    } catch (const json::exception& e) {
        fail("{}: {}", name, e.what());
    }
}

namespace {

json byte_level_step(bool use_regex) {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json pre_tokenizer_json(const PreTokenizer& pre) {
    if (pre.canonical_name() == "gpt-2") return byte_level_step(true);
    json first;
    if (pre.split_digits())
        first = {{"type", "Digits"}, {"individual_digits", true}};
    else
        first = {
            {"type", "Split"}, {"pattern", {{"Regex", pre.pattern()}}}, {"behavior", "Isolated"}, {"invert", false}};
    return {{"type", "Sequence"}, {"pretokenizers", {first, byte_level_step(pre.split_digits())}}};
}

// SentencePiece keeps scores, not merges: every split of a token into two tokens is a merge, ordered by
// the merged token's score (higher first), then by id, so HF's rank order follows the score order.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const TokenizerData& data) {
    TokenMap ids;
    for (size_t id = 0; id < data.tokens.size(); ++id) ids.emplace(data.tokens[id], static_cast<int32_t>(id));
    struct Candidate {
        float score;
        int32_t id;
        size_t split;
    };
    std::vector<Candidate> candidates;
    for (size_t id = 0; id < data.tokens.size(); ++id) {
        const std::string& text = data.tokens[id];
        if (data.types[id] != TokenType::normal && data.types[id] != TokenType::user_defined) continue;
        for (size_t split = utf8_step(text, 0).length; split < text.size(); split += utf8_step(text, split).length)
            if (ids.contains(std::string_view(text).substr(0, split)) &&
                ids.contains(std::string_view(text).substr(split)))
                candidates.push_back({data.scores[id], static_cast<int32_t>(id), split});
    }
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        return a.score != b.score ? a.score > b.score : a.id < b.id;
    });
    std::vector<std::pair<std::string, std::string>> merges;
    for (const Candidate& c : candidates) {
        const std::string& text = data.tokens[c.id];
        merges.emplace_back(text.substr(0, c.split), text.substr(c.split));
    }
    return merges;
}

}  // namespace

void write_hf_tokenizer_json(const TokenizerData& data, const std::filesystem::path& path) {
    Tokenizer checked(data);  // validates the data and fills the defaults (types, scores)
    const TokenizerData& d = checked.data();
    const bool spm = d.kind == TokenizerKind::sentencepiece_bpe;
    auto text_or_null = [&](int32_t id) { return id >= 0 ? json(d.tokens[id]) : json(nullptr); };

    json j;
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = json::array();
    for (size_t id = 0; id < d.tokens.size(); ++id) {
        TokenType t = d.types[id];
        if (t != TokenType::control && t != TokenType::unknown && t != TokenType::user_defined) continue;
        j["added_tokens"].push_back({{"id", id},
                                     {"content", d.tokens[id]},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", t != TokenType::user_defined}});
    }
    json model = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", text_or_null(d.unk_id)},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", spm},
                  {"byte_fallback", spm},
                  {"ignore_merges", false}};
    if (spm) {
        json normalizers = json::array();
        if (d.add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSentencePieceSpace}});
        normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSentencePieceSpace}});
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
        j["pre_tokenizer"] = nullptr;
    } else {
        PreTokenizer pre(d.pre);
        model["ignore_merges"] = pre.ignore_merges();
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = pre_tokenizer_json(pre);
    }
    j["post_processor"] = nullptr;
    if (d.add_bos && d.bos_id >= 0) {
        const std::string& bos = d.tokens[d.bos_id];
        json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
        j["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single", {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {d.bos_id}}, {"tokens", {bos}}}}}}};
    }
    if (spm) {
        json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kSentencePieceSpace}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}}};
        if (d.add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
        j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    } else {
        j["decoder"] = byte_level_step(true);
    }
    json vocab = json::object();
    for (size_t id = 0; id < d.tokens.size(); ++id) vocab[d.tokens[id]] = id;
    if (vocab.size() != d.tokens.size())
        fail("{}: the vocabulary repeats a token text; tokenizer.json cannot hold it", path.string());
    model["vocab"] = std::move(vocab);
    json merges = json::array();
    if (spm) {
        for (auto& [left, right] : merges_from_scores(d)) merges.push_back({left, right});
    } else {
        for (const std::string& m : d.merges) {
            size_t space = m.find(' ', 1);
            merges.push_back({m.substr(0, space), m.substr(space + 1)});
        }
    }
    model["merges"] = std::move(merges);
    j["model"] = std::move(model);

    std::filesystem::path config_path = path.parent_path() / "tokenizer_config.json";
    json config = json::object();
    if (std::filesystem::exists(config_path)) config = read_json(config_path);
    if (!config.is_object()) fail("{}: not a JSON object", config_path.string());
    config["bos_token"] = text_or_null(d.bos_id);
    config["eos_token"] = text_or_null(d.eos_id);
    config["unk_token"] = text_or_null(d.unk_id);
    config["pad_token"] = text_or_null(d.pad_id);
    config["add_bos_token"] = d.add_bos;
    if (!config.contains("tokenizer_class")) config["tokenizer_class"] = "PreTrainedTokenizerFast";

    auto write = [](const std::filesystem::path& p, const json& value, int indent) {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out << value.dump(indent) << '\n';
        if (!out) fail("{}: cannot write", p.string());
    };
    write(path, j, -1);
    write(config_path, config, 2);
}

}  // namespace mk

// safetensors: writer/reader round trip, sharded directories, and malformed files rejected with errors
// naming the file and the tensor.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/error.hpp"
#include "models/quant.hpp"
#include "models/safetensors.hpp"
#include "tests/test_paths.hpp"

using Catch::Matchers::Contains;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
    auto dir = mk::test::output_dir() / "safetensors" / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// A safetensors image from header JSON text and a data section.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data, uint64_t declared = 0) {
    uint64_t n = declared ? declared : header.size();
    std::vector<uint8_t> out(8);
    for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        mk::SafetensorsFile::parse(bytes.data(), bytes.size(), "model.safetensors");
    } catch (const mk::Error& e) {
        return e.what();
    }
    return "no error";
}

// Two tensors: a (2, 3) f32 of 1..6 and a (4) bf16.
void write_two(const std::filesystem::path& path, const std::string& first = "a", const std::string& second = "b") {
    mk::SafetensorsWriter w;
    w.set_metadata("format", "pt");
    w.add(first, mk::DType::F32, {2, 3});
    w.add(second, mk::DType::BF16, {4});
    w.write(path, [](size_t i, std::span<uint8_t> dst) {
        float values[6] = {1, 2, 3, 4, 5, 6};
        if (i == 0) {
            REQUIRE(dst.size() == 24);
            std::memcpy(dst.data(), values, 24);
        } else {
            REQUIRE(dst.size() == 8);
            for (int k = 0; k < 4; ++k) {
                uint16_t b = mk::f32_to_bf16(values[k] * 10);
                std::memcpy(dst.data() + 2 * k, &b, 2);
            }
        }
    });
}

}  // namespace

TEST_CASE("safetensors writer and reader round trip", "[cpu]") {
    auto path = fresh_dir("roundtrip") / "model.safetensors";
    write_two(path);
    mk::SafetensorsFile f = mk::SafetensorsFile::open(path);
    CHECK(f.name() == "model.safetensors");
    CHECK(f.metadata().at("format") == "pt");
    REQUIRE(f.tensors().size() == 2);
    mk::TensorView a = f.tensor("a");
    CHECK(a.dtype == mk::DType::F32);
    CHECK(a.shape == std::vector<int64_t>{2, 3});
    REQUIRE(a.n_bytes == 24);
    float got[6];
    std::memcpy(got, a.data, 24);
    CHECK(got[5] == 6.0f);
    CHECK(reinterpret_cast<uintptr_t>(a.data) % 64 == 0);  // the first tensor starts the aligned data section
    mk::TensorView b = f.tensor("b");
    CHECK(b.dtype == mk::DType::BF16);
    uint16_t b3;
    std::memcpy(&b3, b.data + 6, 2);
    CHECK(mk::bf16_to_f32(b3) == 40.0f);
    CHECK_THROWS_WITH(f.tensor("c"), Contains("model.safetensors") && Contains("tensor c"));

    mk::SafetensorsModel m = mk::SafetensorsModel::open(path.parent_path());
    CHECK(m.tensor_names() == std::vector<std::string>{"a", "b"});
    CHECK(m.tensor("b").data == m.file_of("b").tensor("b").data);
}

TEST_CASE("safetensors: sharded model with an index", "[cpu]") {
    auto dir = fresh_dir("sharded");
    write_two(dir / "model-00001-of-00002.safetensors", "x.weight", "y.weight");
    write_two(dir / "model-00002-of-00002.safetensors", "z.weight", "w.weight");
    {
        std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {"total_size": 64}, "weight_map": {
            "x.weight": "model-00001-of-00002.safetensors", "y.weight": "model-00001-of-00002.safetensors",
            "z.weight": "model-00002-of-00002.safetensors", "w.weight": "model-00002-of-00002.safetensors"}})";
    }
    mk::SafetensorsModel m = mk::SafetensorsModel::open(dir);
    CHECK(m.files().size() == 2);
    CHECK(m.tensor("z.weight").shape == std::vector<int64_t>{2, 3});
    CHECK(m.file_of("w.weight").name() == "model-00002-of-00002.safetensors");
    CHECK_THROWS_WITH(m.tensor("q.weight"), Contains("q.weight"));

    {
        std::ofstream(dir / "model.safetensors.index.json")
            << R"({"weight_map": {"x.weight": "model-00002-of-00002.safetensors"}})";
    }
    CHECK_THROWS_WITH(mk::SafetensorsModel::open(dir), Contains("model.safetensors.index.json") && Contains("x.weight"));
    {
        std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"x.weight": "../evil.safetensors"}})";
    }
    CHECK_THROWS_WITH(mk::SafetensorsModel::open(dir), Contains("plain file name"));
    CHECK_THROWS_WITH(mk::SafetensorsModel::open(fresh_dir("empty")), Contains("model.safetensors"));
}

TEST_CASE("safetensors: malformed headers are rejected naming the file and tensor", "[cpu]") {
    const std::vector<uint8_t> data(24, 0);
    const std::string ok = R"({"t": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})";
    CHECK(parse_error(image(ok, data)) == "no error");

    CHECK_THAT(parse_error({1, 2, 3}), Contains("model.safetensors") && Contains("truncated"));
    // The header claims more bytes than the file holds.
    CHECK_THAT(parse_error(image(ok, {}, ok.size() + 100)), Contains("model.safetensors") && Contains("truncated header"));
    CHECK_THAT(parse_error(image(ok, data, uint64_t(1) << 40)), Contains("model.safetensors") && Contains("absurd"));
    CHECK_THAT(parse_error(image("[1, 2]", data)), Contains("not a JSON object"));
    CHECK_THAT(parse_error(image("{\"t\": ", data)), Contains("not a JSON object"));

    auto entry = [&](const std::string& body) { return parse_error(image(R"({"t": )" + body + "}", data)); };
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 28]})"),
               Contains("model.safetensors: tensor t") && Contains("outside"));
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]})"),
               Contains("tensor t") && Contains("needs 16"));
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 24]})"), Contains("tensor t"));
    CHECK_THAT(entry(R"({"dtype": "Q4", "shape": [2, 3], "data_offsets": [0, 24]})"), Contains("unknown dtype"));
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [2, 3]})"), Contains("data_offsets"));
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [20, 4]})"), Contains("tensor t"));
    CHECK_THAT(entry(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 24]})"),
               Contains("absurd"));

    // Known but unusable dtypes parse; using the tensor names the file, the tensor and the dtype.
    std::vector<uint8_t> i64 = image(R"({"ids": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}})", data);
    mk::SafetensorsFile f = mk::SafetensorsFile::parse(i64.data(), i64.size(), "model.safetensors");
    CHECK_THROWS_WITH(f.tensor("ids"), Contains("model.safetensors") && Contains("tensor ids") && Contains("I64"));
}

TEST_CASE("safetensors writer refuses block formats", "[cpu]") {
    mk::SafetensorsWriter w;
    CHECK_THROWS_WITH(w.add("q", mk::DType::Q4_0, {32}), Contains("Q4_0"));
}

TEST_CASE("safetensors: mutated images parse or throw mk::Error, never crash", "[cpu]") {
    const std::string header = R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], )"
                               R"("data_offsets": [0, 24]}, "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}})";
    const std::vector<uint8_t> good = image(header, std::vector<uint8_t>(32, 7));
    std::mt19937 rng(1);
    int n_errors = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<uint8_t> bytes = good;
        for (int k = 0; k < 1 + trial % 4; ++k) bytes[rng() % bytes.size()] = uint8_t(rng());
        if (trial % 7 == 0) bytes.resize(rng() % bytes.size());
        try {
            mk::SafetensorsFile f = mk::SafetensorsFile::parse(bytes.data(), bytes.size(), "fuzz.safetensors");
            for (const auto& t : f.tensors()) {
                REQUIRE(t.end <= bytes.size());
                if (t.dtype) CHECK(f.tensor(t.name).n_bytes == t.end - t.begin);
            }
        } catch (const mk::Error& e) {
            ++n_errors;
            CHECK_THAT(e.what(), Contains("fuzz.safetensors"));
        }
    }
    CHECK(n_errors > 100);
}

// GGUF reader and writer: writer -> reader round trips of every value type and tensor dtype, one
// case per kind of bad input (checked by message), byte-mutation robustness, and the real default model.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>

#include "models/error.hpp"
#include "models/gguf.hpp"
#include "models/gguf_writer.hpp"
#include "models/quant.hpp"
#include "tests/test_paths.hpp"
#include "tests/test_skip.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using mk::DType;
using mk::GgufFile;
using mk::GgufType;

namespace {

// Hand-built GGUF images, independent of GgufWriter, so malformed files can be made.
struct Bytes {
    std::vector<uint8_t> b;
    template <typename T>
    Bytes& put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
        return *this;
    }
    Bytes& u32(uint32_t v) { return put(v); }
    Bytes& u64(uint64_t v) { return put(v); }
    Bytes& str(std::string_view s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        b.insert(b.end(), {'G', 'G', 'U', 'F'});
        return u32(version).u64(n_tensors).u64(n_kv);
    }
    Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(uint32_t(GgufType::U32)).u32(v); }
    Bytes& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
        str(name).u32(uint32_t(dims.size()));
        for (uint64_t d : dims) u64(d);
        return u32(type).u64(offset);
    }
    Bytes& pad(size_t alignment = 32) {
        b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
        return *this;
    }
    Bytes& zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
};

std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    } catch (const mk::Error& e) {
        return e.what();
    }
    return "(parsed without error)";
}

// A valid 160-byte file: two keys and one F32 tensor of 8 values ending exactly at the end of the file.
std::vector<uint8_t> tiny_file() {
    Bytes f;
    f.header(1, 2);
    f.str("general.name").u32(uint32_t(GgufType::STRING)).str("tiny");
    f.kv_u32("llama.block_count", 2);
    f.tensor("w", {8}, 0, 0).pad().zeros(32);
    return f.b;
}

GgufType array_type(const mk::GgufValue& v) { return v.as_array().element_type; }

}  // namespace

TEST_CASE("gguf: the hand-built tiny file parses", "[cpu]") {
    auto bytes = tiny_file();
    REQUIRE(bytes.size() == 160);
    GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    CHECK(f.version() == 3);
    CHECK(f.get_string("general.name") == "tiny");
    CHECK(f.get_u64("llama.block_count") == 2);
    REQUIRE(f.tensors().size() == 1);
    mk::TensorView w = f.tensor("w");
    CHECK(w.shape == std::vector<int64_t>{8});
    CHECK(w.data == bytes.data() + 128);
    CHECK(w.n_bytes == 32);
}

TEST_CASE("gguf: round trip of every metadata type", "[cpu]") {
    mk::GgufWriter w;
    w.add_u8("t.u8", 255);
    w.add_i8("t.i8", -128);
    w.add_u16("t.u16", 65535);
    w.add_i16("t.i16", -32768);
    w.add_u32("t.u32", 4000000000u);
    w.add_i32("t.i32", -2000000000);
    w.add_u64("t.u64", std::numeric_limits<uint64_t>::max());
    w.add_i64("t.i64", std::numeric_limits<int64_t>::min());
    w.add_f32("t.f32", 0.1f);
    w.add_f64("t.f64", 0.1);
    w.add_bool("t.true", true);
    w.add_bool("t.false", false);
    w.add_string("t.string", std::string("h\0llo \xc3\xa9", 9));
    w.add_string("t.empty", "");
    w.add_strings("t.strings", {"a", "", "<|im_end|>"});
    std::vector<int32_t> i32s = {1, -2, 3};
    w.add_i32s("t.i32s", i32s);
    std::vector<uint32_t> u32s = {7, 8};
    w.add_u32s("t.u32s", u32s);
    std::vector<float> f32s = {1.5f, -0.25f};
    w.add_f32s("t.f32s", f32s);
    w.add_i32s("t.none", {});
    // [[1, 2], [], [[true]]]: an array of arrays whose third element nests once more.
    auto value = [](GgufType type, auto v) { mk::GgufValue x; x.type = type; x.value = v; return x; };
    mk::GgufArray inner{GgufType::I32, {value(GgufType::I32, int64_t(1)), value(GgufType::I32, int64_t(2))}};
    mk::GgufArray innermost{GgufType::BOOL, {value(GgufType::BOOL, true)}};
    mk::GgufArray middle{GgufType::ARRAY, {value(GgufType::ARRAY, innermost)}};
    mk::GgufArray outer{GgufType::ARRAY, {value(GgufType::ARRAY, inner), value(GgufType::ARRAY, mk::GgufArray{GgufType::U8, {}}),
                                          value(GgufType::ARRAY, middle)}};
    w.add("t.nested", value(GgufType::ARRAY, outer));

    auto bytes = w.to_bytes();
    GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    CHECK(f.metadata().size() == 20);
    CHECK(f.get("t.u8").type == GgufType::U8);
    CHECK(f.get_u64("t.u8") == 255);
    CHECK(f.get("t.i8").as_i64() == -128);
    CHECK(f.get_u64("t.u16") == 65535);
    CHECK(f.get("t.i16").as_i64() == -32768);
    CHECK(f.get_u64("t.u32") == 4000000000u);
    CHECK(f.get("t.i32").as_i64() == -2000000000);
    CHECK(f.get_u64("t.u64") == std::numeric_limits<uint64_t>::max());
    CHECK(f.get("t.i64").as_i64() == std::numeric_limits<int64_t>::min());
    CHECK(f.get_f64("t.f32") == double(0.1f));
    CHECK(f.get("t.f32").type == GgufType::F32);
    CHECK(f.get_f64("t.f64") == 0.1);
    CHECK(f.get_bool("t.true"));
    CHECK_FALSE(f.get_bool("t.false"));
    CHECK(f.get_string("t.string") == std::string("h\0llo \xc3\xa9", 9));
    CHECK(f.get_string("t.empty").empty());
    const auto& strings = f.get("t.strings").as_array();
    CHECK(strings.element_type == GgufType::STRING);
    REQUIRE(strings.values.size() == 3);
    CHECK(strings.values[2].as_string() == "<|im_end|>");
    CHECK(f.get("t.i32s").as_array().values[1].as_i64() == -2);
    CHECK(f.get("t.u32s").as_array().values[1].as_u64() == 8);
    CHECK(f.get("t.f32s").as_array().values[1].as_f64() == -0.25);
    CHECK(array_type(f.get("t.none")) == GgufType::I32);
    CHECK(f.get("t.none").as_array().values.empty());
    const auto& nested = f.get("t.nested").as_array();
    REQUIRE(nested.values.size() == 3);
    CHECK(nested.values[0].as_array().values[1].as_i64() == 2);
    CHECK(array_type(nested.values[1]) == GgufType::U8);
    CHECK(nested.values[2].as_array().values[0].as_array().values[0].as_bool());
}

TEST_CASE("gguf: typed getters convert losslessly or fail naming the key", "[cpu]") {
    mk::GgufWriter w;
    w.add_string("general.name", "x");
    w.add_i32("neg", -1);
    w.add_u64("big", std::numeric_limits<uint64_t>::max());
    auto bytes = w.to_bytes();
    GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    CHECK(f.get_u64("missing", 7) == 7);
    CHECK(f.get_string("missing", "d") == "d");
    CHECK(f.get("neg").as_f64() == -1.0);
    CHECK_THROWS_WITH(f.get("missing"), "t.gguf: missing key missing");
    CHECK_THROWS_WITH(f.get_u64("general.name"), "t.gguf: key general.name: expected an unsigned integer, got string");
    CHECK_THROWS_WITH(f.get_u64("neg"), "t.gguf: key neg: expected an unsigned integer, got i32 -1");
    CHECK_THROWS_WITH(f.get("big").as_i64(), Contains("too large"));
    CHECK_THROWS_WITH(f.get_f64("big"), Contains("expected a number a double holds exactly"));
    CHECK_THROWS_WITH(f.tensor("nope"), "t.gguf: tensor nope: not found");
}

TEST_CASE("gguf: round trip of tensors of every dtype, through a file", "[cpu]") {
    const DType dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1, 1);
    mk::GgufWriter w;
    w.add_u32("general.alignment", 64);
    std::vector<std::vector<uint8_t>> expected;
    for (DType dt : dtypes) {
        std::vector<float> values(3 * 256);
        for (float& v : values) v = uniform(rng);
        std::vector<uint8_t> bytes(3 * mk::row_bytes(dt, 256));
        for (int r = 0; r < 3; ++r) mk::quantize_row(dt, values.data() + 256 * r, bytes.data() + r * mk::row_bytes(dt, 256), 256);
        w.add_tensor(std::string("t.") + std::string(mk::dtype_name(dt)), dt, {3, 256}, bytes);
        expected.push_back(bytes);
    }
    std::vector<float> four_d(2 * 3 * 4 * 5, 1.0f);
    w.add_tensor_f32("four_d", DType::F32, {2, 3, 4, 5}, four_d);

    auto path = std::filesystem::temp_directory_path() / "mk_gguf_test_roundtrip.gguf";
    w.write(path);
    GgufFile f = GgufFile::open(path);
    std::filesystem::remove(path);
    CHECK(f.alignment() == 64);
    REQUIRE(f.tensors().size() == 9);
    for (size_t i = 0; i < std::size(dtypes); ++i) {
        mk::TensorView t = f.tensor(std::string("t.") + std::string(mk::dtype_name(dtypes[i])));
        CHECK(t.dtype == dtypes[i]);
        CHECK(t.shape == std::vector<int64_t>{3, 256});
        CHECK(f.tensors()[i].dims == std::vector<uint64_t>{256, 3});
        CHECK(size_t(t.data - f.mapping()->data()) % 64 == 0);
        REQUIRE(t.n_bytes == expected[i].size());
        CHECK(std::memcmp(t.data, expected[i].data(), t.n_bytes) == 0);
    }
    mk::TensorView t4 = f.tensor("four_d");
    CHECK(t4.shape == std::vector<int64_t>{2, 3, 4, 5});
    CHECK(t4.n_rows() == 24);
    float last;
    std::memcpy(&last, t4.data + t4.n_bytes - 4, 4);
    CHECK(last == 1.0f);
}

TEST_CASE("gguf writer: rejects bad input", "[cpu]") {
    mk::GgufWriter w;
    w.add_u32("a", 1);
    CHECK_THROWS_WITH(w.add_u32("a", 2), "gguf writer: key a: added twice");
    CHECK_THROWS_WITH(w.add_tensor("w", DType::F32, {2, 3}, std::vector<uint8_t>(20)),
                      "gguf writer: tensor w: 20 bytes given, F32 2x3 needs 24");
    CHECK_THROWS_WITH(w.add_tensor("w", DType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), Contains("5 dims"));
    CHECK_THROWS_WITH(w.add_tensor("w", DType::Q8_0, {2, 30}, std::vector<uint8_t>(68)), Contains("tensor w: a Q8_0 row of 30"));
    w.add_u32("general.alignment", 48);
    CHECK_THROWS_WITH(w.to_bytes(), Contains("48 is not a power of two"));
}

TEST_CASE("gguf: every truncation of a valid file is an error", "[cpu]") {
    auto bytes = tiny_file();
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + ptrdiff_t(n));
        INFO("prefix of " << n << " bytes");
        CHECK_THAT(parse_error(prefix), StartsWith("t.gguf: "));
    }
    CHECK(parse_error({}) == "t.gguf: truncated: the GGUF magic needs 4 bytes at offset 0, but the file has 0 bytes");
    Bytes cut;
    cut.header(0, 1).str("general.name").u32(uint32_t(GgufType::STRING)).put(uint16_t(4));
    CHECK(parse_error(cut.b) ==
          "t.gguf: key general.name: truncated: the string value needs 8 bytes at offset 48, but the file has 50 bytes");
    CHECK(parse_error(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)) ==
          "t.gguf: tensor w: data [128, 160) lies past the end of the file (159 bytes)");
}

TEST_CASE("gguf: wrong magic", "[cpu]") {
    auto bytes = tiny_file();
    bytes[3] = 'X';
    CHECK(parse_error(bytes) == "t.gguf: not a GGUF file: it starts with bytes 47 47 55 58, not 'GGUF'");
}

TEST_CASE("gguf: unsupported version", "[cpu]") {
    CHECK(parse_error(Bytes().header(0, 0, 1).b) == "t.gguf: unsupported GGUF version 1 (mk reads versions 2 and 3)");
    CHECK(parse_error(Bytes().header(0, 0, 4).b) == "t.gguf: unsupported GGUF version 4 (mk reads versions 2 and 3)");
    CHECK(parse_error(Bytes().header(0, 0, 0x03000000).b) == "t.gguf: big-endian GGUF files are not supported");
    CHECK(parse_error(Bytes().header(0, 0, 2).b) == "(parsed without error)");
}

TEST_CASE("gguf: absurd string lengths", "[cpu]") {
    CHECK(parse_error(Bytes().header(0, 1).u64(uint64_t(1) << 60).zeros(16).b) ==
          "t.gguf: metadata entry 0: key length 1152921504606846976 exceeds the 16 bytes left in the file");
    Bytes value;
    value.header(0, 1).str("general.name").u32(uint32_t(GgufType::STRING)).u64(uint64_t(1) << 60);
    CHECK(parse_error(value.b) == "t.gguf: key general.name: string value length 1152921504606846976 exceeds the 0 bytes left in the file");
}

TEST_CASE("gguf: absurd tensor, metadata and array counts", "[cpu]") {
    CHECK(parse_error(Bytes().header(uint64_t(1) << 40, 0).zeros(100).b) ==
          "t.gguf: tensor count 1099511627776 cannot fit in the 100 bytes left in the file");
    CHECK(parse_error(Bytes().header(0, uint64_t(1) << 40).zeros(100).b) ==
          "t.gguf: metadata count 1099511627776 cannot fit in the 100 bytes left in the file");
    Bytes array;
    array.header(0, 1).str("a").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::U32)).u64(uint64_t(1) << 60).zeros(8);
    CHECK(parse_error(array.b) == "t.gguf: key a: array of 1152921504606846976 u32 values cannot fit in the 8 bytes left in the file");
}

TEST_CASE("gguf: bad metadata values", "[cpu]") {
    CHECK(parse_error(Bytes().header(0, 1).str("a").u32(13).u32(0).b) == "t.gguf: key a: unknown value type 13");
    CHECK(parse_error(Bytes().header(0, 1).str("a").u32(uint32_t(GgufType::BOOL)).put(uint8_t(2)).b) ==
          "t.gguf: key a: bool value 2 is neither 0 nor 1");
    CHECK(parse_error(Bytes().header(0, 1).kv_u32("general.alignment", 48).b) ==
          "t.gguf: key general.alignment: 48 is not a power of two up to 2^30");
}

TEST_CASE("gguf: duplicate key and duplicate tensor name", "[cpu]") {
    CHECK(parse_error(Bytes().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).b) == "t.gguf: key a.b: duplicate key");
    Bytes dup;
    dup.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().zeros(64);
    CHECK(parse_error(dup.b) == "t.gguf: tensor w: duplicate tensor name");
}

TEST_CASE("gguf: arrays nest at most 8 deep", "[cpu]") {
    auto nest = [](int depth) {
        Bytes f;
        f.header(0, 1).str("deep").u32(uint32_t(GgufType::ARRAY));
        for (int i = 1; i < depth; ++i) f.u32(uint32_t(GgufType::ARRAY)).u64(1);
        f.u32(uint32_t(GgufType::U8)).u64(1).put(uint8_t(5));
        return f.b;
    };
    CHECK(parse_error(nest(8)) == "(parsed without error)");
    CHECK(parse_error(nest(9)) == "t.gguf: key deep: arrays nested more than 8 deep");
    CHECK(parse_error(nest(100000)) == "t.gguf: key deep: arrays nested more than 8 deep");
}

TEST_CASE("gguf: bad tensor infos", "[cpu]") {
    auto one_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data_bytes) {
        Bytes f;
        f.header(1, 0).tensor("blk.3.ffn_up", std::move(dims), type, offset).pad().zeros(data_bytes);
        return f.b;
    };
    CHECK(parse_error(one_tensor({1, 1, 1, 1, 1}, 0, 0, 32)) == "t.gguf: tensor blk.3.ffn_up: n_dims 5 is not in [1, 4]");
    CHECK(parse_error(one_tensor({8, 0}, 0, 0, 32)) == "t.gguf: tensor blk.3.ffn_up: dimension 1 is 0");
    CHECK(parse_error(one_tensor({1000}, 0, 0, 64)) ==
          "t.gguf: tensor blk.3.ffn_up: data [96, 4096) lies past the end of the file (160 bytes)");
    CHECK(parse_error(one_tensor({8}, 0, 4, 64)) ==
          "t.gguf: tensor blk.3.ffn_up: data offset 4 is not a multiple of the alignment 32");
    CHECK(parse_error(one_tensor({32}, 6, 0, 64)) ==
          "t.gguf: tensor blk.3.ffn_up: unsupported tensor type Q5_0 (ggml type id 6)");
    CHECK(parse_error(one_tensor({32}, 99, 0, 64)) == "t.gguf: tensor blk.3.ffn_up: unsupported tensor type ? (ggml type id 99)");
    CHECK(parse_error(one_tensor({30}, uint32_t(DType::Q8_0), 0, 64)) ==
          "t.gguf: tensor blk.3.ffn_up: row length 30 is not a multiple of the Q8_0 block size 32");
    CHECK(parse_error(one_tensor({uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 64)) ==
          "t.gguf: tensor blk.3.ffn_up: size in bytes overflows 64 bits");
    CHECK_THAT(parse_error(one_tensor({8}, 0, ~uint64_t(31), 64)), Contains("overflows 64 bits"));
}

TEST_CASE("gguf: random byte mutations give a file or an mk::Error, never a crash", "[cpu]") {
    mk::GgufWriter w;
    w.add_strings("tokens", {"a", "bb", "ccc"});
    w.add_u32("n", 3);
    std::vector<float> values(64, 0.5f);
    w.add_tensor_f32("q", DType::Q8_0, {2, 32}, values);
    const auto original = w.to_bytes();
    std::mt19937 rng(1);
    int n_parsed = 0;
    for (int iteration = 0; iteration < 3000; ++iteration) {
        auto bytes = original;
        for (int k = int(rng() % 4); k >= 0; --k) bytes[rng() % bytes.size()] = uint8_t(rng());
        try {
            GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
            ++n_parsed;
        } catch (const mk::Error& e) {
            REQUIRE_THAT(e.what(), StartsWith("t.gguf: "));
        }
    }
    CHECK(n_parsed > 0);
}

TEST_CASE("gguf: the default SmolLM2 model", "[model]") {
    auto path = mk::test::default_model_path();
    MK_SKIP_IF_MISSING(path, "./tools/setup.sh");
    GgufFile f = GgufFile::open(path);
    CHECK(f.tensors().size() == 272);
    CHECK(f.get_u64("llama.block_count") == 30);
    mk::TensorView embd = f.tensor("token_embd.weight");
    CHECK(embd.dtype == DType::Q8_0);
    CHECK(embd.shape == std::vector<int64_t>{49152, 576});
    int n_q4_1 = 0, n_f32 = 0;
    for (const auto& t : f.tensors()) {
        n_q4_1 += t.dtype == DType::Q4_1;
        n_f32 += t.dtype == DType::F32;
    }
    CHECK(n_q4_1 == 210);
    CHECK(n_f32 == 61);
    CHECK(f.get("tokenizer.ggml.tokens").as_array().values.size() == 49152);
    // A row of the embedding dequantizes to finite values of a plausible size.
    std::vector<float> row(576);
    mk::dequantize_row(embd.dtype, embd.row(1000), row.data(), 576);
    for (float v : row) REQUIRE(std::fabs(v) < 100.0f);
}

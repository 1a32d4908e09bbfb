// Session::save / Session::load: a session's tokens and KV cache in one file, with what they are only
// valid for (the model's name and a hash of its configuration and weights, the schedule's hash, the context length), so a
// state is never loaded into a session that would read it as something else.
#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

#include "mk/session.hpp"
#include "runtime/api/impl.hpp"

namespace mk::api {

namespace {

constexpr char kMagic[8] = {'M', 'K', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr uint32_t kVersion = 1;

struct Fnv {
    uint64_t h = 0xcbf29ce484222325ull;
    void mix(const void* data, size_t n) {
        for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001b3ull;
    }
    void mix_u64(uint64_t x) { mix(&x, sizeof x); }
};

// The configuration's hash and a fingerprint of the weights (each tensor's type, size and first and last
// 256 bytes): two files of one shape with other weights (another quantization, another seed) differ,
// without reading ~100 MB.
uint64_t model_hash(const mk::Model& m) {
    Fnv f;
    f.mix_u64(m.config.hash());
    for (const TensorView* t : m.weights()) {
        f.mix_u64(uint64_t(t->dtype));
        f.mix_u64(t->n_bytes);
        const size_t n = std::min<size_t>(256, t->n_bytes);
        f.mix(t->data, n);
        f.mix(t->data + t->n_bytes - n, n);
    }
    return f.h;
}

// FNV-1a over what decides the KV cache's meaning and layout: the target, the ranks, the weight formats
// and every instruction (a schedule for other SMs or another policy computes the same numbers only
// within rounding).
uint64_t schedule_hash(const mk::Schedule& s) {
    Fnv f;
    auto mix = [&](const void* data, size_t n) { f.mix(data, n); };
    mix(&s.target.n_sms, sizeof s.target.n_sms);
    mix(&s.tp_size, sizeof s.tp_size);
    mix(&s.config_hash, sizeof s.config_hash);
    mix(s.policy.data(), s.policy.size());
    for (const WeightFormat& w : s.weights)  // field by field: the struct has padding
        for (uint64_t x : {uint64_t(w.dtype), uint64_t(w.rows), uint64_t(w.cols), w.row_bytes}) mix(&x, sizeof x);
    static_assert(sizeof(Instruction) == 128, "instructions are hashed as their 32 words");
    for (const auto& stream : s.streams) mix(stream.data(), stream.size() * sizeof(Instruction));
    return f.h;
}

struct Header {
    uint64_t config_hash = 0, schedule_hash = 0;
    uint32_t ctx_len = 0, n_tokens = 0;
    uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
    std::string model_name;
};

class Writer {
public:
    template <typename T>
    void put(const T& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void put_bytes(const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); }
    std::string bytes;
};

// Bounds-checked reads from the file's bytes; every failure names the file.
class Reader {
public:
    Reader(const std::string& path, const std::string& bytes) : path_(path), bytes_(bytes) {}
    template <typename T>
    T get(const char* what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
    const char* take(uint64_t n, const char* what) {
        if (n > bytes_.size() - at_) fail("{}: truncated session state (reading {} at byte {})", path_, what, at_);
        const char* p = bytes_.data() + at_;
        at_ += n;
        return p;
    }
    size_t left() const { return bytes_.size() - at_; }

private:
    const std::string& path_;
    const std::string& bytes_;
    size_t at_ = 0;
};

Header header_of(Session::Impl& s) {
    const mk::Schedule& schedule = s.engine.program().schedule();
    Header h;
    h.config_hash = model_hash(s.model->model);
    h.schedule_hash = schedule_hash(schedule);
    h.ctx_len = s.engine.program().ctx_len();
    h.n_tokens = uint32_t(s.tokens.size());
    h.n_layers = schedule.dims.n_layers;
    h.n_kv_heads = schedule.dims.n_kv_heads;
    h.head_dim = schedule.dims.head_dim;
    h.model_name = s.model->model.config.name;
    return h;
}

}  // namespace

void Session::save(const std::string& path) const {
    guard(path.c_str(), [&] {
        static_assert(std::endian::native == std::endian::little, "the state file is little-endian");
        const Header h = header_of(*impl_);
        const Program& program = impl_->engine.program();
        std::vector<float> k(kv_floats(program.schedule(), h.n_tokens)), v(k.size());
        program.read_kv(h.n_tokens, k, v);
        Writer w;
        w.put_bytes(kMagic, sizeof kMagic);
        w.put(kVersion);
        w.put(h.config_hash);
        w.put(h.schedule_hash);
        for (uint32_t x : {h.ctx_len, h.n_tokens, h.n_layers, h.n_kv_heads, h.head_dim, uint32_t(h.model_name.size())})
            w.put(x);
        w.put_bytes(h.model_name.data(), h.model_name.size());
        w.put_bytes(impl_->tokens.data(), impl_->tokens.size() * sizeof(int32_t));
        w.put_bytes(k.data(), k.size() * sizeof(float));
        w.put_bytes(v.data(), v.size() * sizeof(float));
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        if (!out || !out.write(w.bytes.data(), std::streamsize(w.bytes.size())) || !out.flush())
            fail("cannot write the session state");
    });
}

void Session::load(const std::string& path) {
    guard(path.c_str(), [&] {
        std::ifstream in(path, std::ios::binary);
        if (!in) fail("{}: cannot open the session state", path);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        Reader r(path, bytes);
        if (std::memcmp(r.take(sizeof kMagic, "the magic"), kMagic, sizeof kMagic) != 0)
            fail("{}: not an mk session state (no MKSTATE magic)", path);
        if (const uint32_t version = r.get<uint32_t>("the version"); version != kVersion)
            fail("{}: session state version {}; this mk reads version {}", path, version, kVersion);
        Header f;
        f.config_hash = r.get<uint64_t>("the model hash");
        f.schedule_hash = r.get<uint64_t>("the schedule hash");
        for (uint32_t* x : {&f.ctx_len, &f.n_tokens, &f.n_layers, &f.n_kv_heads, &f.head_dim}) *x = r.get<uint32_t>("the header");
        const uint32_t name_len = r.get<uint32_t>("the model name");
        f.model_name.assign(r.take(name_len, "the model name"), name_len);

        const Header h = header_of(*impl_);
        if (f.config_hash != h.config_hash || f.model_name != h.model_name)
            fail("{}: saved for model '{}' (model hash {:016x}); this session runs '{}' ({:016x})", path, f.model_name,
                 f.config_hash, h.model_name, h.config_hash);
        if (f.ctx_len != h.ctx_len)
            fail("{}: saved with a context of {} tokens; this session has {} (use -c {})", path, f.ctx_len, h.ctx_len,
                 f.ctx_len);
        if (f.schedule_hash != h.schedule_hash || f.n_layers != h.n_layers || f.n_kv_heads != h.n_kv_heads ||
            f.head_dim != h.head_dim)
            fail("{}: saved by a session with another schedule (hash {:016x}, this one {:016x}); use the same "
                 "target, policy, --tp and weights", path, f.schedule_hash, h.schedule_hash);
        if (f.n_tokens > f.ctx_len) fail("{}: {} tokens in a context of {}", path, f.n_tokens, f.ctx_len);

        Program& program = impl_->engine.program();
        const uint64_t n_floats = kv_floats(program.schedule(), f.n_tokens);
        const uint64_t want = uint64_t(f.n_tokens) * sizeof(int32_t) + 2 * n_floats * sizeof(float);
        if (r.left() != want) fail("{}: {} bytes of tokens and KV cache, {} expected", path, r.left(), want);
        std::vector<int32_t> tokens(f.n_tokens);
        std::memcpy(tokens.data(), r.take(tokens.size() * sizeof(int32_t), "the tokens"), tokens.size() * sizeof(int32_t));
        for (int32_t id : tokens)
            if (id < 0 || id >= impl_->model->model.config.vocab_size)
                fail("{}: token id {} is outside the vocabulary ({})", path, id, impl_->model->model.config.vocab_size);
        std::vector<float> k(n_floats), v(n_floats);
        std::memcpy(k.data(), r.take(n_floats * sizeof(float), "the K cache"), n_floats * sizeof(float));
        std::memcpy(v.data(), r.take(n_floats * sizeof(float), "the V cache"), n_floats * sizeof(float));
        program.write_kv(f.n_tokens, k, v);
        impl_->tokens = std::move(tokens);
        impl_->has_logits = false;
    });
}

}  // namespace mk::api

// .mks reading and writing. Every field is written explicitly little-endian (no struct dumps), and
// the parser checks each count against the bytes left before allocating anything.
#include "scheduler/schedule_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "models/error.hpp"

namespace mk {

namespace {

constexpr char kMagic[8] = {'M', 'K', 'S', 'C', 'H', 'E', 'D', '\0'};
constexpr size_t kRecordBytes = 128;
constexpr uint32_t kMaxString = 1 << 16;
constexpr uint32_t kMaxStreams = 1 << 16;
constexpr uint32_t kMaxCounters = 1 << 16;  // counter ids are u16
constexpr uint32_t kMaxWeights = 1 << 24;
constexpr uint32_t kMaxHeads = 1 << 12;  // as validate_config's limit on heads and head_dim
constexpr uint32_t kMaxWeightRows = 1 << 24;  // as validate_config's limit on the vocabulary

uint64_t fnv1a64(const uint8_t* data, size_t size) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

class Writer {
public:
    std::vector<uint8_t> out;
    void u8(uint8_t v) { out.push_back(v); }
    void u16(uint16_t v) { le(v, 2); }
    void u32(uint32_t v) { le(v, 4); }
    void u64(uint64_t v) { le(v, 8); }
    void f32(float v) { u32(bits<uint32_t>(v)); }
    void f64(double v) { u64(bits<uint64_t>(v)); }
    void str(const std::string& s) {
        if (s.size() > kMaxString)
            fail("schedule: string '{}...' is longer than {} bytes", s.substr(0, 32), kMaxString);
        u32(uint32_t(s.size()));
        out.insert(out.end(), s.begin(), s.end());
    }

private:
    template <typename T, typename F>
    static T bits(F v) {
        T t;
        std::memcpy(&t, &v, sizeof t);
        return t;
    }
    void le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) out.push_back(uint8_t(v >> (8 * i)));
    }
};

class Reader {
public:
    Reader(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}
    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }

    uint8_t u8(const char* what) { return uint8_t(le(1, what)); }
    uint16_t u16(const char* what) { return uint16_t(le(2, what)); }
    uint32_t u32(const char* what) { return uint32_t(le(4, what)); }
    uint64_t u64(const char* what) { return le(8, what); }
    float f32(const char* what) {
        const uint32_t b = u32(what);
        float v;
        std::memcpy(&v, &b, 4);
        return v;
    }
    double f64(const char* what) {
        const uint64_t b = u64(what);
        double v;
        std::memcpy(&v, &b, 8);
        return v;
    }
    std::string str(const char* what) {
        const uint32_t n = u32(what);
        if (n > kMaxString) fail("{}: {} is {} bytes long, more than {} (corrupt file)", name_, what, n, kMaxString);
        need(n, what);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
        pos_ += n;
        return s;
    }
    // A count of records of at least `min_bytes` each: refused when above `max` or when the bytes
    // left cannot hold that many.
    uint32_t count(const char* what, size_t min_bytes, uint32_t max) {
        const uint32_t n = u32(what);
        if (n > max) fail("{}: {} {} is more than the {} allowed (corrupt file)", name_, n, what, max);
        if (uint64_t(n) * min_bytes > left())
            fail("{}: truncated: {} {} need at least {} bytes at offset {}, {} left", name_, n, what,
                 uint64_t(n) * min_bytes, pos_, left());
        return n;
    }

private:
    void need(size_t n, const char* what) {
        if (n > left()) fail("{}: truncated: {} needs {} bytes at offset {}, {} left", name_, what, n, pos_, left());
    }
    uint64_t le(int n, const char* what) {
        need(size_t(n), what);
        uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= uint64_t(data_[pos_ + i]) << (8 * i);
        pos_ += size_t(n);
        return v;
    }
    const uint8_t* data_;
    size_t size_, pos_ = 0;
    const std::string& name_;
};

void write_instruction(Writer& w, const Instruction& i) {
    w.u16(i.opcode);
    w.u8(i.n_waits);
    w.u8(i.n_signals);
    w.u8(i.n_pages);
    w.u8(i.flags);
    w.u16(i.reserved0);
    w.u32(i.seq);
    for (const Wait& wt : i.waits) {
        w.u16(wt.counter);
        w.u16(wt.operand);
        w.u32(wt.target);
    }
    for (const Signal& s : i.signals) {
        w.u16(s.counter);
        w.u16(s.delta);
    }
    for (uint32_t r : i.reserved1) w.u32(r);
    for (uint32_t a : i.args) w.u32(a);
}

Instruction read_instruction(Reader& r) {
    Instruction i{};
    i.opcode = r.u16("opcode");
    i.n_waits = r.u8("n_waits");
    i.n_signals = r.u8("n_signals");
    i.n_pages = r.u8("n_pages");
    i.flags = r.u8("flags");
    i.reserved0 = r.u16("reserved");
    i.seq = r.u32("seq");
    for (Wait& wt : i.waits) wt = {r.u16("wait counter"), r.u16("wait operand"), r.u32("wait target")};
    for (Signal& s : i.signals) s = {r.u16("signal counter"), r.u16("signal delta")};
    for (uint32_t& x : i.reserved1) x = r.u32("reserved");
    for (uint32_t& a : i.args) a = r.u32("args");
    return i;
}

}  // namespace

std::vector<uint8_t> serialize_schedule(const Schedule& s) {
    Writer w;
    w.out.insert(w.out.end(), std::begin(kMagic), std::end(kMagic));
    w.u32(kScheduleVersion);
    const Target& t = s.target;
    w.str(t.name);
    w.u32(t.n_sms);
    w.u64(t.smem_bytes);
    w.u64(t.page_bytes);
    w.u32(t.n_pages);
    w.f64(t.bandwidth_gbs);
    w.f64(t.sm_gflops);
    w.f64(t.hop_ns);
    w.f64(t.instruction_ns);
    w.f64(t.link_gbs);
    w.f64(t.link_ns);
    const ModelDims& d = s.dims;
    for (uint32_t v : {d.n_layers, d.d_model, d.n_heads, d.n_kv_heads, d.head_dim, d.d_ff, d.vocab}) w.u32(v);
    w.f32(d.norm_eps);
    w.u32(d.qkv_bias);
    w.u32(d.qk_norm);
    w.u64(s.config_hash);
    w.u32(s.tp_size);
    w.u64(s.rank_arena_bytes);
    w.str(s.policy);
    w.u32(s.n_attn_parts);
    w.u32(s.n_lm_blocks);
    if (s.weights.size() > kMaxWeights || s.buffers.size() > kMaxString || s.counters.size() > kMaxCounters ||
        s.streams.size() > kMaxStreams)
        fail("schedule: too many weights, buffers, counters or streams to save");
    w.u32(uint32_t(s.weights.size()));
    for (const WeightFormat& f : s.weights) {
        w.u32(f.dtype);
        w.u32(f.rows);
        w.u32(f.cols);
        w.u64(f.row_bytes);
    }
    w.u32(uint32_t(s.buffers.size()));
    for (const BufferInfo& b : s.buffers) {
        w.str(b.name);
        w.u64(b.offset);
        w.u64(b.bytes);
        w.str(b.layout);
    }
    w.u64(s.arena_bytes);
    w.u32(s.logits_off);
    w.u32(s.token_off);
    w.u32(uint32_t(s.counters.size()));
    for (const CounterInfo& c : s.counters) {
        w.str(c.name);
        w.u32(c.step_total);
    }
    w.u32(uint32_t(s.streams.size()));
    for (const auto& stream : s.streams) {
        w.u32(uint32_t(stream.size()));
        for (const Instruction& i : stream) write_instruction(w, i);
    }
    w.u64(fnv1a64(w.out.data(), w.out.size()));
    return std::move(w.out);
}

Schedule parse_schedule(const uint8_t* bytes, size_t size, const std::string& name) {
    constexpr size_t kHeader = sizeof(kMagic) + 4;
    if (size < kHeader + 8) fail("{}: {} bytes is too small to be an mk schedule", name, size);
    if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) fail("{}: not an mk schedule (bad magic)", name);
    Reader header(bytes + sizeof(kMagic), 4, name);
    const uint32_t version = header.u32("version");
    if (version != kScheduleVersion)
        fail("{}: schedule version {}, this build reads version {}; compile the schedule again", name, version,
             kScheduleVersion);
    Reader tail(bytes + size - 8, 8, name);
    const uint64_t stored = tail.u64("checksum"), computed = fnv1a64(bytes, size - 8);
    if (stored != computed)
        fail("{}: checksum mismatch (stored {:016x}, computed {:016x}): the file is corrupt or truncated", name, stored,
             computed);

    Reader r(bytes + kHeader, size - kHeader - 8, name);
    Schedule s;
    Target& t = s.target;
    t.name = r.str("target name");
    t.n_sms = r.u32("n_sms");
    t.smem_bytes = r.u64("smem_bytes");
    t.page_bytes = r.u64("page_bytes");
    t.n_pages = r.u32("n_pages");
    t.bandwidth_gbs = r.f64("bandwidth_gbs");
    t.sm_gflops = r.f64("sm_gflops");
    t.hop_ns = r.f64("hop_ns");
    t.instruction_ns = r.f64("instruction_ns");
    t.link_gbs = r.f64("link_gbs");
    t.link_ns = r.f64("link_ns");
    ModelDims& d = s.dims;
    for (uint32_t* v : {&d.n_layers, &d.d_model, &d.n_heads, &d.n_kv_heads, &d.head_dim, &d.d_ff, &d.vocab})
        *v = r.u32("model dims");
    // Head counts size per-head loops in the verifier and the ops: refuse what validate_config calls absurd.
    if (d.n_heads > kMaxHeads || d.n_kv_heads > kMaxHeads || d.head_dim > kMaxHeads)
        fail("{}: model dims claim {} heads, {} KV heads of head_dim {}, more than {} (corrupt file)", name, d.n_heads,
             d.n_kv_heads, d.head_dim, kMaxHeads);
    d.norm_eps = r.f32("norm_eps");
    d.qkv_bias = r.u32("qkv_bias");
    d.qk_norm = r.u32("qk_norm");
    s.config_hash = r.u64("config_hash");
    s.tp_size = r.u32("tp_size");
    s.rank_arena_bytes = r.u64("rank_arena_bytes");
    if (s.tp_size == 0 || s.tp_size > 64 || t.n_sms == 0)
        fail("{}: tensor-parallel size {} with {} SMs per rank (corrupt file)", name, s.tp_size, t.n_sms);
    s.policy = r.str("policy");
    s.n_attn_parts = r.u32("n_attn_parts");
    s.n_lm_blocks = r.u32("n_lm_blocks");
    s.weights.resize(r.count("weights", 20, kMaxWeights));
    for (WeightFormat& f : s.weights) {
        f.dtype = r.u32("weight dtype");
        f.rows = r.u32("weight rows");
        f.cols = r.u32("weight cols");
        f.row_bytes = r.u64("weight row_bytes");
        // Page plans make one tile per page of rows: refuse more rows than any model has (vocab <= 2^24).
        if (f.rows > kMaxWeightRows || f.cols > kMaxWeightRows)
            fail("{}: a weight of {} rows × {} columns, more than {} (corrupt file)", name, f.rows, f.cols,
                 kMaxWeightRows);
    }
    s.buffers.resize(r.count("buffers", 24, kMaxString));
    for (BufferInfo& b : s.buffers) {
        b.name = r.str("buffer name");
        b.offset = r.u64("buffer offset");
        b.bytes = r.u64("buffer bytes");
        b.layout = r.str("buffer layout");
    }
    s.arena_bytes = r.u64("arena_bytes");
    s.logits_off = r.u32("logits_off");
    s.token_off = r.u32("token_off");
    s.counters.resize(r.count("counters", 8, kMaxCounters));
    for (CounterInfo& c : s.counters) {
        c.name = r.str("counter name");
        c.step_total = r.u32("counter step_total");
    }
    s.streams.resize(r.count("streams", 4, kMaxStreams));
    for (auto& stream : s.streams) {
        stream.resize(r.count("instructions", kRecordBytes, UINT32_MAX));
        for (Instruction& i : stream) i = read_instruction(r);
    }
    if (r.left() != 0) fail("{}: {} unexpected bytes after the last stream", name, r.left());
    return s;
}

void save_schedule(const Schedule& schedule, const std::string& path) {
    const std::vector<uint8_t> bytes = serialize_schedule(schedule);
    // Write a sibling then rename, so a reader never sees half a file.
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
        f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        if (!f.flush()) fail("{}: write failed: {}", tmp, std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        fail("{}: cannot rename from {}: {}", path, tmp, std::strerror(errno));
}

Schedule load_schedule(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) fail("{}: read failed: {}", path, std::strerror(errno));
    return parse_schedule(bytes.data(), bytes.size(), path);
}

}  // namespace mk

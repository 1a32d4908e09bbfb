// .mks reading and writing. Every field is written explicitly little-endian (no struct dumps), and
// the parser checks each count against the bytes left before allocating anything.
#include "scheduler/schedule_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <type_traits>

#include <unistd.h>

#include <fmt/format.h>

#include "models/error.hpp"
#include "scheduler/schedule_fields.hpp"

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

    uint8_t u8(std::string_view what) { return uint8_t(le(1, what)); }
    uint16_t u16(std::string_view what) { return uint16_t(le(2, what)); }
    uint32_t u32(std::string_view what) { return uint32_t(le(4, what)); }
    uint64_t u64(std::string_view what) { return le(8, what); }
    float f32(std::string_view what) {
        const uint32_t b = u32(what);
        float v;
        std::memcpy(&v, &b, 4);
        return v;
    }
    double f64(std::string_view what) {
        const uint64_t b = u64(what);
        double v;
        std::memcpy(&v, &b, 8);
        return v;
    }
    std::string str(std::string_view what) {
        const uint32_t n = u32(what);
        if (n > kMaxString) fail("{}: {} is {} bytes long, more than {} (corrupt file)", name_, what, n, kMaxString);
        need(n, what);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
        pos_ += n;
        return s;
    }
    // A count of records of at least `min_bytes` each: refused when above `max` or when the bytes
    // left cannot hold that many.
    uint32_t count(std::string_view what, size_t min_bytes, uint32_t max) {
        const uint32_t n = u32(what);
        if (n > max) fail("{}: {} {} is more than the {} allowed (corrupt file)", name_, n, what, max);
        if (uint64_t(n) * min_bytes > left())
            fail("{}: truncated: {} {} need at least {} bytes at offset {}, {} left", name_, n, what,
                 uint64_t(n) * min_bytes, pos_, left());
        return n;
    }

private:
    void need(size_t n, std::string_view what) {
        if (n > left()) fail("{}: truncated: {} needs {} bytes at offset {}, {} left", name_, what, n, pos_, left());
    }
    uint64_t le(int n, std::string_view what) {
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

// A record's size in the file when its strings are empty: what a count of them needs at least.
template <typename R>
size_t min_record_bytes() {
    if constexpr (std::is_same_v<R, std::vector<Instruction>>) {
        return 4;  // a stream: its instruction count
    } else {
        size_t n = 0;
        R record{};
        visit_record(record, [&](const char*, const auto& f) {
            n += std::is_same_v<std::decay_t<decltype(f)>, std::string> ? 4 : sizeof f;
        });
        return n;
    }
}

// The most records of each list a file may hold.
uint32_t max_records(std::string_view list) {
    if (list == "weights") return kMaxWeights;
    if (list == "counters") return kMaxCounters;
    if (list == "streams") return kMaxStreams;
    return kMaxString;  // buffers
}

struct WriteFields {
    Writer& w;
    void put(uint32_t v) { w.u32(v); }
    void put(uint64_t v) { w.u64(v); }
    void put(float v) { w.f32(v); }
    void put(double v) { w.f64(v); }
    void put(const std::string& v) { w.str(v); }
    void put(const std::vector<Instruction>& stream) {
        w.u32(uint32_t(stream.size()));
        for (const Instruction& i : stream) write_instruction(w, i);
    }
    template <typename R>
    void put(const R& record) {
        visit_record(record, [&](const char*, const auto& f) { put(f); });
    }
    template <typename R>
    void list(std::string_view name, const std::vector<R>& records) {
        if (records.size() > max_records(name))
            fail("schedule: {} {} to save, a file holds at most {}", records.size(), name, max_records(name));
        w.u32(uint32_t(records.size()));
        for (const R& r : records) put(r);
    }
    template <typename F>
    void operator()(std::string_view, std::string_view name, const F& field) {
        if constexpr (requires { field.size(); typename F::value_type; } && !std::is_same_v<F, std::string>)
            list(name, field);
        else
            put(field);
    }
};

struct ReadFields {
    Reader& r;
    std::string what;  // "target name", "weights row_bytes": named in a refusal
    void get(uint32_t& v) { v = r.u32(what); }
    void get(uint64_t& v) { v = r.u64(what); }
    void get(float& v) { v = r.f32(what); }
    void get(double& v) { v = r.f64(what); }
    void get(std::string& v) { v = r.str(what); }
    void get(std::vector<Instruction>& stream) {
        stream.resize(r.count("instructions", kRecordBytes, UINT32_MAX));
        for (Instruction& i : stream) i = read_instruction(r);
    }
    template <typename R>
    void get(R& record) {
        const std::string list = what;
        visit_record(record, [&](const char* field, auto& f) {
            what = fmt::format("{} {}", list, field);
            get(f);
        });
        what = list;
    }
    template <typename F>
    void operator()(std::string_view section, std::string_view name, F& field) {
        what = section.empty() ? std::string(name) : fmt::format("{} {}", section, name);
        if constexpr (requires { field.size(); typename F::value_type; } && !std::is_same_v<F, std::string>) {
            using R = typename F::value_type;
            field.resize(r.count(what, min_record_bytes<R>(), max_records(name)));
            for (R& record : field) get(record);
        } else {
            get(field);
        }
    }
};

// What a well-formed file cannot claim: sizes that later loops would trust.
void check_limits(const Schedule& s, const std::string& name) {
    const ModelDims& d = s.dims;
    // Head counts size per-head loops in the verifier and the ops: refuse what validate_config calls absurd.
    if (d.n_heads > kMaxHeads || d.n_kv_heads > kMaxHeads || d.head_dim > kMaxHeads)
        fail("{}: model dims claim {} heads, {} KV heads of head_dim {}, more than {} (corrupt file)", name, d.n_heads,
             d.n_kv_heads, d.head_dim, kMaxHeads);
    if (d.kv_type >= kKvTypeCount)
        fail("{}: KV-cache type {} is not one this build knows (0 f32, 1 bf16); compile the schedule again", name,
             d.kv_type);
    if (s.tp_size == 0 || s.tp_size > 64 || s.target.n_sms == 0)
        fail("{}: tensor-parallel size {} with {} SMs per rank (corrupt file)", name, s.tp_size, s.target.n_sms);
    // Page plans make one tile per page of rows: refuse more rows than any model has (vocab <= 2^24).
    for (const WeightFormat& f : s.weights)
        if (f.rows > kMaxWeightRows || f.cols > kMaxWeightRows)
            fail("{}: a weight of {} rows × {} columns, more than {} (corrupt file)", name, f.rows, f.cols,
                 kMaxWeightRows);
}

}  // namespace

std::vector<uint8_t> serialize_schedule(const Schedule& s) {
    Writer w;
    // assign, not insert into the empty vector: GCC 12 warns falsely on that insert at -O2 (bug 107852).
    w.out.assign(std::begin(kMagic), std::end(kMagic));
    w.u32(kScheduleVersion);
    visit_schedule_fields(s, WriteFields{w});
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
    visit_schedule_fields(s, ReadFields{r, ""});
    if (r.left() != 0) fail("{}: {} unexpected bytes after the last stream", name, r.left());
    check_limits(s, name);
    return s;
}

void save_schedule(const Schedule& schedule, const std::string& path) {
    const std::vector<uint8_t> bytes = serialize_schedule(schedule);
    // Write a sibling (named by the process: two writers of one file each rename a whole one) then rename, so a
    // reader never sees half a file.
    const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
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

// mk_dot_bench: CPU row-dot kernels on model-shaped matrices, scalar vs AVX2 exact vs q16 fast in
// one run: GB/s of weight bytes (mean ± sd over repeats), speed-ups, and the fast mode's error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "models/error.hpp"
#include "models/quant.hpp"

namespace {

using mk::CpuIsa;
using mk::DType;

struct Options {
    std::vector<std::string> formats = {"Q4_1", "Q8_0", "BF16", "F16", "F32", "Q4_0", "Q4_K", "Q6_K"};
    std::vector<int64_t> cols = {576, 1536};
    int64_t rows = 3072;
    int repeats = 20;
    double footprint_mb = 0;  // 0: one matrix, reused (cache-hot); else copies rotated (DRAM)
    bool raw = false;
};

struct Stats {
    double mean = 0, sd = 0;
};

Stats stats(const std::vector<double>& v) {
    Stats s;
    for (double x : v) s.mean += x;
    s.mean /= double(v.size());
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0;
    return s;
}

DType parse_dtype(const std::string& name) {
    for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K})
        if (mk::dtype_name(d) == name) return d;
    mk::fail("unknown format {}", name);
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown CPU";
}

// The commit of the source tree at run time ("+" when it has uncommitted changes).
std::string git_commit() {
    std::string cmd = std::string("git -C '") + MK_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[64];
        while (fgets(buf, sizeof buf, p)) out += buf;
        pclose(p);
    }
    out.erase(std::remove(out.begin(), out.end(), '\n'), out.end());
    if (out.empty()) return "unknown";
    cmd = std::string("git -C '") + MK_SOURCE_DIR + "' diff --quiet HEAD 2>/dev/null";
    return std::system(cmd.c_str()) == 0 ? out : out + "+";
}

enum class Mode { Read, Scalar, Avx2, Q16 };

struct Matrix {
    DType dtype;
    int64_t rows, cols;
    size_t row_bytes;
    std::vector<std::vector<uint8_t>> copies;  // each (rows, cols) in dtype, rows contiguous
};

Matrix make_matrix(DType dtype, int64_t rows, int64_t cols, double footprint_mb, std::mt19937& rng) {
    Matrix m{dtype, rows, cols, mk::row_bytes(dtype, cols), {}};
    std::normal_distribution<float> normal(0, 0.05f);  // roughly a trained layer's weight scale
    std::vector<float> values(static_cast<size_t>(cols));
    std::vector<uint8_t> first(m.row_bytes * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : values) v = normal(rng);
        mk::quantize_row(dtype, values.data(), first.data() + size_t(r) * m.row_bytes, cols);
    }
    const double mb = double(first.size()) / 1e6;
    const size_t n_copies = footprint_mb > 0 ? size_t(std::max(1.0, std::ceil(footprint_mb / mb))) : 1;
    m.copies.assign(n_copies, first);
    return m;
}

// The read baseline: every weight byte loaded once (32-byte loads where the CPU has AVX2) and summed
// as 64-bit words, about the most a kernel streaming the same bytes could reach.
uint64_t read_bytes_portable(const uint8_t* p, size_t n) {
    uint64_t acc[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k) {
            uint64_t v;
            std::memcpy(&v, p + i + 8 * k, 8);
            acc[k] += v;
        }
    for (; i < n; ++i) acc[0] += p[i];
    return acc[0] + acc[1] + acc[2] + acc[3];
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_bytes_avx2(const uint8_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    auto* v = reinterpret_cast<const __m256i*>(p);
    size_t i = 0;
    for (; i + 128 <= n; i += 128, v += 4) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    // GCC 12 left the upper halves dirty here, and the scalar (SSE) kernels measured next ran 4x slower.
    _mm256_zeroupper();
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + read_bytes_portable(p + i, n - i);
}
#endif

uint64_t read_bytes(const uint8_t* p, size_t n) {
#if defined(__x86_64__)
    if (mk::cpu_has_isa(CpuIsa::Avx2)) return read_bytes_avx2(p, n);
#endif
    return read_bytes_portable(p, n);
}

// One matrix-vector product: the unit an instruction runs (q16 includes quantizing x once, as an op
// quantizes its input once per instruction).
void matvec(Mode mode, const Matrix& m, const uint8_t* w, const float* x, std::vector<mk::BlockQ16>& xq, float* out) {
    switch (mode) {
        case Mode::Read: out[0] = float(read_bytes(w, m.row_bytes * size_t(m.rows))); return;
        case Mode::Q16:
            mk::quantize_activations_q16(x, m.cols, xq.data());
            for (int64_t r = 0; r < m.rows; ++r) out[r] = mk::dot_row_q16(m.dtype, w + size_t(r) * m.row_bytes, xq.data(), m.cols);
            return;
        case Mode::Scalar:
        case Mode::Avx2: {
            const CpuIsa isa = mode == Mode::Scalar ? CpuIsa::Scalar : CpuIsa::Avx2;
            for (int64_t r = 0; r < m.rows; ++r) out[r] = mk::dot_row(isa, m.dtype, w + size_t(r) * m.row_bytes, x, m.cols);
            return;
        }
    }
}

// GB/s samples of weight bytes, after two warm-up passes.
std::vector<double> measure(Mode mode, const Matrix& m, const std::vector<float>& x, int repeats, std::vector<float>& out) {
    std::vector<mk::BlockQ16> xq(size_t(m.cols / 32));
    const double bytes = double(m.row_bytes) * double(m.rows);
    for (int i = 0; i < 2; ++i) matvec(mode, m, m.copies[0].data(), x.data(), xq, out.data());
    std::vector<double> gbps;
    for (int i = 0; i < repeats; ++i) {
        const uint8_t* w = m.copies[size_t(i + 1) % m.copies.size()].data();
        const auto t0 = std::chrono::steady_clock::now();
        matvec(mode, m, w, x.data(), xq, out.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gbps.push_back(bytes / s / 1e9);
    }
    return gbps;
}

// A fast mode's worst error, relative to the largest |exact| output (as logits are compared).
double fast_error(const Matrix& m, const std::vector<float>& x, const std::vector<float>& fast_out) {
    std::vector<float> row(size_t(m.cols));
    double max_err = 0, max_ref = 0;
    for (int64_t r = 0; r < m.rows; ++r) {
        mk::dequantize_row(m.dtype, m.copies[0].data() + size_t(r) * m.row_bytes, row.data(), m.cols);
        double ref = 0;
        for (int64_t i = 0; i < m.cols; ++i) ref += double(row[size_t(i)]) * double(x[size_t(i)]);
        max_err = std::max(max_err, std::fabs(double(fast_out[size_t(r)]) - ref));
        max_ref = std::max(max_ref, std::fabs(ref));
    }
    return max_ref > 0 ? max_err / max_ref : 0;
}

int run(const Options& o) {
    const bool avx2 = mk::cpu_has_isa(CpuIsa::Avx2);
    fmt::print("mk_dot_bench: commit {}, {} ({} threads), active ISA {}, rows {}, repeats {}, {}\n", git_commit(),
               cpu_model(), std::thread::hardware_concurrency(), mk::cpu_isa_name(), o.rows, o.repeats,
               o.footprint_mb > 0 ? fmt::format("{} MB of copies rotated (DRAM)", o.footprint_mb) : std::string("one matrix (cache-hot)"));
    fmt::print("GB/s of weight bytes, mean ± sd. read: the bytes summed as 64-bit words (the streaming ceiling); q16\n"
               "runs on the active ISA and include quantizing x; err = max |fast - float64| / max |float64| over the rows\n\n");
    fmt::print("| format | cols | MB | read GB/s | scalar GB/s | avx2 GB/s | q16 GB/s | avx2/scalar | q16/scalar | q16/read "
               "| q16 err |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::mt19937 rng(1);
    std::string raw;
    for (const std::string& name : o.formats) {
        const DType dtype = parse_dtype(name);
        for (int64_t cols : o.cols) {
            if (cols % mk::dtype_traits(dtype).block_values != 0) {
                fmt::print("| {} | {} | rows are not whole {}-value blocks |\n", name, cols, mk::dtype_traits(dtype).block_values);
                continue;
            }
            const Matrix m = make_matrix(dtype, o.rows, cols, o.footprint_mb, rng);
            std::vector<float> x(static_cast<size_t>(cols)), out(static_cast<size_t>(o.rows));
            std::normal_distribution<float> normal(0, 1);
            for (float& v : x) v = normal(rng);
            const Mode modes[4] = {Mode::Read, Mode::Scalar, Mode::Avx2, Mode::Q16};
            const char* mode_names[4] = {"read", "scalar", "avx2", "q16"};
            std::vector<double> samples[4];
            Stats s[4];
            std::string err[4] = {"-", "-", "-", "-"};
            for (int i = 0; i < 4; ++i) {
                if ((modes[i] == Mode::Avx2 && !avx2) || (modes[i] == Mode::Q16 && !mk::has_q16_dot(dtype))) continue;
                samples[i] = measure(modes[i], m, x, o.repeats, out);
                s[i] = stats(samples[i]);
                if (modes[i] == Mode::Q16) err[i] = fmt::format("{:.1e}", fast_error(m, x, out));
                raw += fmt::format("{} {} {}: {:.2f}\n", name, cols, mode_names[i], fmt::join(samples[i], " "));
            }
            auto show = [&](int i) { return samples[i].empty() ? std::string("-") : fmt::format("{:.2f} ± {:.2f}", s[i].mean, s[i].sd); };
            auto ratio = [&](int a, int b) {
                return samples[a].empty() || samples[b].empty() ? std::string("-") : fmt::format("{:.1f}x", s[a].mean / s[b].mean);
            };
            auto share = [&](int a) {
                return samples[a].empty() ? std::string("-") : fmt::format("{:.0f}%", 100 * s[a].mean / s[0].mean);
            };
            fmt::print("| {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name, cols,
                       double(m.row_bytes) * double(m.rows) / 1e6, show(0), show(1), show(2), show(3), ratio(2, 1),
                       ratio(3, 1), share(3), err[3]);
        }
    }
    if (o.raw) fmt::print("\nraw samples (GB/s):\n{}", raw);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"CPU row-dot kernels: scalar vs AVX2 exact vs q16 fast"};
    app.add_option("--formats", o.formats, "Formats to measure")->delimiter(',');
    app.add_option("--cols", o.cols, "Row lengths")->delimiter(',');
    app.add_option("--rows", o.rows, "Rows per matrix");
    app.add_option("--repeats", o.repeats, "Timed passes per mode")->check(CLI::PositiveNumber);
    app.add_option("--footprint-mb", o.footprint_mb, "Rotate copies totalling this many MB (0: one cache-hot matrix)");
    app.add_flag("--raw", o.raw, "Print every sample");
    CLI11_PARSE(app, argc, argv);
    try {
        return run(o);
    } catch (const mk::Error& e) {
        fmt::print(stderr, "mk_dot_bench: error: {}\n", e.what());
        return 1;
    }
}

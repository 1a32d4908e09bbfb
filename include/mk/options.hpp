// The plain option structs of the mk API: how to run (backend, target, threads, context), how to
// sample, and how to generate. Defaults are the `mk generate` defaults.
#pragma once
#include <cstdint>
#include <string>

namespace mk::api {

// Where and how a session runs. The schedule is compiled for `target` (or --sms/--smem) unless
// `schedule_file` names a .mks file, which is checked against the model and verified.
struct BackendOptions {
    std::string backend = "auto";         // cpu | cuda | cuda-kernels | auto (auto: cpu until the CUDA backend is verified on a GPU)
    std::string target;                   // h200 | cpu; "" the CPU backend's own
    uint32_t sms = 0;                     // a custom target: SMs (with smem_bytes)
    uint64_t smem_bytes = 0;              // a custom target: shared memory per SM
    std::string policy = "critical-path"; // critical-path | round-robin
    std::string schedule_file;            // a .mks from `mk schedule` or Schedule::save
    uint32_t threads = 0;                 // CPU worker threads; 0 one per core
    uint32_t ctx_len = 0;                 // KV-cache positions; 0 min(model context, 4096)
    bool check_pages = false;             // CPU: stage weights through per-SM pages, check the accounting
    bool detect_races = false;            // CPU: vector-clock race detector (slow)
    std::string cpu_dots = "q16";         // CPU: q16 (activations as 16-bit blocks: 1.2-1.5x faster) | exact (fp32)
    bool stepwise = false;                // cuda: one launch per step instead of the resident kernel
    bool graph = false;                   // cuda-kernels: replay each step as a captured CUDA graph
    uint32_t watchdog_ms = 2000;          // cuda: a wait longer than this aborts the kernel with a fault report
    std::string trace_file;               // cuda: write a Chrome/Perfetto trace of the instructions run
    uint32_t tp = 1;                      // tensor-parallel ranks (cpu: emulated in this process)
    uint32_t tp_loopback = 0;             // cuda: N ranks as disjoint SM partitions of one GPU (0 off)
    uint32_t batch = 256;                 // prompt tokens per prefill step (llama.cpp's -b); 1 token by token
                                          // (the CUDA backends and --tp still run prompts token by token)
    bool all_logits = false;              // keep every fed token's logits (Session::feed_logits), e.g. for perplexity
    std::string kv_type;                  // f32 | bf16: how the KV cache stores K and V ("" f32, or the schedule file's)
};

// The sampling rule: repetition penalty, temperature, top-k, softmax, min-p, top-p, then an
// inverse-CDF draw keyed by (seed, position), so a seed gives the same text on every backend whose logits
// agree (cpu_dots = "exact" on the CPU; q16 moves them by up to ~1e-3, which can change a close draw).
struct SamplingOptions {
    float temperature = 0.0f;     // 0 greedy
    int32_t top_k = 0;            // 0 off
    float top_p = 1.0f;           // 1 off
    float min_p = 0.0f;           // 0 off
    float repeat_penalty = 1.0f;  // 1 off
    int32_t repeat_last_n = 64;   // how many recent tokens the penalty sees
    uint64_t seed = 0;
};

struct GenerateOptions {
    int32_t max_tokens = 128;  // tokens to generate at most
    SamplingOptions sampling;
    bool stop_at_end = true;   // stop at the model's end-of-generation tokens
    bool chat = false;         // wrap the prompt as one user message in the model's chat template
    std::string system;        // chat: the system message ("" the template's own default)
    bool append = false;       // continue after the tokens the session holds (its KV cache) instead of afresh
};

}  // namespace mk::api

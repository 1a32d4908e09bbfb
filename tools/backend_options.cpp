// The shared backend flags (see backend_options.hpp).
#include "tools/backend_options.hpp"

namespace mk::tools {

void add_backend_options(CLI::App* cmd, BackendOptions& o) {
    cmd->add_option("--backend", o.backend,
                    "cpu | cuda (the resident megakernel) | cuda-kernels (one kernel per op) | cuda-emu, "
                    "cuda-kernels-emu (the same device code run by the CUDA emulator on the CPU: slow, for checking "
                    "without a GPU) | auto (cpu until the CUDA backend is verified on a GPU by tools/gpu-check.sh)")
        ->check(CLI::IsMember({"cpu", "cuda", "cuda-kernels", "cuda-emu", "cuda-kernels-emu", "auto"}));
    cmd->add_option("--target", o.target, "Compile the schedule for this target: h200 | cpu (default cpu)");
    cmd->add_option("--sms", o.sms, "Compile for N SMs (with --smem) instead of a named target");
    cmd->add_option("--smem", o.smem_bytes, "Shared memory per SM in bytes (with --sms)");
    cmd->add_option("--policy", o.policy, "Assignment policy: critical-path | round-robin")
        ->check(CLI::IsMember({"critical-path", "round-robin"}));
    cmd->add_option("--schedule", o.schedule_file, "Run this .mks schedule (from `mk schedule`) instead of compiling one");
    cmd->add_option("-t,--threads", o.threads, "CPU worker threads (default: one per core)");
    cmd->add_option("-c,--ctx-size", o.ctx_len, "Context length in tokens (default: the model's, at most 4096)");
    cmd->add_option("-b,--batch", o.batch,
                    "Prompt tokens per prefill step (default 256; each weight is read once a chunk; on the cpu backend "
                    "with --tp the ranks split it as a decode step); 1: token by token. On the CUDA backends at most "
                    "what the scratch holds (about max(d_model + 960, 3776) tokens, less with quantized weights or "
                    "--kv-type bf16): a larger -b runs as the largest chunk that fits")
        ->check(CLI::Range(1u, 4096u));
    cmd->add_flag("--check-pages", o.check_pages, "CPU: stage weights through per-SM pages and check the page accounting");
    cmd->add_flag("--detect-races", o.detect_races, "CPU: run the vector-clock race detector (slow)");
    cmd->add_option("--cpu-dots", o.cpu_dots,
                    "CPU: q16 (default: each matvec's input as 16-bit blocks, integer dots on Q8_0/Q4_0/Q4_1 weights, "
                    "1.2-1.5x faster decode, logits within ~1e-3 of fp32) | exact (fp32 activations)")
        ->check(CLI::IsMember({"exact", "q16"}));
    cmd->add_option("--kv-type", o.kv_type,
                    "How the KV cache stores K and V: f32 (default) | bf16 (half the cache bytes; the schedule "
                    "records it, every backend honours it)")
        ->check(CLI::IsMember({"f32", "bf16"}));
    cmd->add_flag("--stepwise", o.stepwise, "cuda: launch the interpreter once per step instead of keeping it resident");
    cmd->add_flag("--graph", o.graph, "cuda-kernels: replay each step as a captured CUDA graph");
    cmd->add_option("--watchdog-ms", o.watchdog_ms,
                    "cuda: a wait longer than this many ms stops the kernel with a fault report (default 2000)")
        ->check(CLI::Range(1u, 3600000u));
    cmd->add_option("--tp", o.tp,
                    "Tensor-parallel ranks: heads, FFN and vocabulary split N ways (must divide the KV heads); on "
                    "the cpu backend the ranks are emulated in this process, on cuda rank r runs on GPU r (NCCL "
                    "symmetric windows, else CUDA peer access)")
        ->check(CLI::Range(1u, 64u));
    cmd->add_option("--tp-loopback", o.tp_loopback,
                    "cuda: run N tensor-parallel ranks as disjoint SM partitions of one GPU, exchanging partial "
                    "results from inside the kernel as separate GPUs would")
        ->check(CLI::Range(1u, 64u));
    cmd->add_option("--trace", o.trace_file, "cuda: write a Chrome/Perfetto trace of the instructions run to this .json file");
}

void add_sampling_options(CLI::App* cmd, api::SamplingOptions& sampling) {
    cmd->add_option("--temp", sampling.temperature, "Temperature; 0 is greedy")->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-p", sampling.top_p, "Nucleus sampling threshold (1: off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--min-p", sampling.min_p, "Drop tokens below min-p x the top probability (0: off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--repeat-penalty", sampling.repeat_penalty, "Penalty on recent tokens (1: off)")->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--repeat-last-n", sampling.repeat_last_n, "How many recent tokens the penalty sees")->check(CLI::NonNegativeNumber);
    cmd->add_option("-s,--seed", sampling.seed, "Sampling seed: the same seed gives the same text on every backend");
}

}  // namespace mk::tools

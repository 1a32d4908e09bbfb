#!/usr/bin/env python3
"""The PyTorch baseline for `mk bench`: HF transformers' LlamaForCausalLM in the shape of mk's synthetic
llama-3.2-1b (models/synthetic.cpp), random bf16 weights made on the GPU, batch-1 greedy decode and prefill.

  eager      model.forward per token with a DynamicCache (what plain HF generation does)
  compiled   torch.compile(mode="reduce-overhead") of the one-token step over a StaticCache (CUDA graphs)
  prefill    eager: one model.forward over a P-token prompt into an empty DynamicCache, the last position's
             logits and argmax (what plain HF generation does with a prompt; mk bench's ppP)
  copy       device-to-device copy bandwidth (bytes read + written), the ceiling for the others

For each context C (a C-token prompt, prefilled once) it times N decode tokens with CUDA events after a
warm-up and prints one JSON line per (mode, ctx): {mode, ctx, ms_per_token, tokens_per_s, weight_bytes, ...}.
weight_bytes is what one decode step must read: every weight once (the tied embedding is the LM head).
prefill prints one line per prompt length P (--pp): {mode: "prefill", test: "ppP", ctx: P, ms (the whole
prompt, mean of --reps), samples_ms, ms_per_token (ms / P), tokens_per_s, weight_bytes, ...}.
Needs only torch, transformers and numpy. --dry-run prints the config and needs none of them.
"""
import argparse
import json
import sys
import time

# mk's synthetic "llama-3.2-1b" shape (models/synthetic.cpp, from the model's own config.json).
LLAMA_3_2_1B = dict(
    num_hidden_layers=16,
    hidden_size=2048,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    intermediate_size=8192,
    vocab_size=128256,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192),
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
    mlp_bias=False,
)


def weight_bytes_of_shape(c, bytes_per_weight=2):
    """Bytes one decode step reads: every layer matrix and norm, the final norm, the (tied) LM head."""
    d, q, kv, ff = c["hidden_size"], c["num_attention_heads"] * c["head_dim"], \
        c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"]
    layer = d * q + 2 * d * kv + q * d + 3 * d * ff + 2 * d
    return bytes_per_weight * (c["num_hidden_layers"] * layer + d + c["vocab_size"] * d)


def make_config(transformers):
    kwargs = dict(LLAMA_3_2_1B)
    config = transformers.LlamaConfig(**kwargs)
    # transformers 5 keeps rope settings in rope_parameters; make sure the llama3 scaling landed.
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type")) != "llama3":
        if hasattr(config, "rope_parameters"):
            config.rope_parameters = dict(LLAMA_3_2_1B["rope_scaling"], rope_theta=LLAMA_3_2_1B["rope_theta"])
        else:
            config.rope_scaling = dict(LLAMA_3_2_1B["rope_scaling"])
    return config


def build_model(torch, transformers, device):
    config = make_config(transformers)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = transformers.LlamaForCausalLM(config)  # random init, made on the GPU in bf16
    finally:
        torch.set_default_dtype(previous)
    model.eval().requires_grad_(False)
    seen, n_bytes = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            n_bytes += p.numel() * p.element_size()
    return model, config, n_bytes


def make_static_cache(transformers, config, max_len, device, dtype):
    import inspect

    params = inspect.signature(transformers.StaticCache.__init__).parameters
    kwargs = dict(config=config, max_cache_len=max_len)
    for key, value in (("max_batch_size", 1), ("batch_size", 1), ("device", device), ("dtype", dtype)):
        if key in params:
            kwargs[key] = value
    return transformers.StaticCache(**kwargs)


def time_decode(torch, step, first_token, ctx, n_tokens, n_warmup):
    """ms per token of n_tokens greedy steps from position ctx, after n_warmup untimed ones."""
    token = first_token
    for i in range(n_warmup):
        token = step(token, ctx + i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(n_tokens):
        token = step(token, ctx + n_warmup + i)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n_tokens


def run_mode(torch, transformers, model, config, mode, ctx, n_tokens, n_warmup, device, compiled_step):
    prompt = torch.randint(0, config.vocab_size, (1, ctx), device=device)
    with torch.inference_mode():
        if mode == "eager":
            cache = transformers.DynamicCache()
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values

            def step(token, pos):
                nonlocal cache
                o = model(input_ids=token, past_key_values=cache, use_cache=True,
                          cache_position=torch.tensor([pos], device=device))
                cache = o.past_key_values
                return o.logits[:, -1:].argmax(-1)
        else:
            cache = compiled_step["cache"]
            cache.reset()
            positions = torch.arange(ctx, device=device)
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=positions,
                        logits_to_keep=1)
            fn = compiled_step["fn"]

            def step(token, pos):
                torch.compiler.cudagraph_mark_step_begin()
                logits = fn(token, torch.tensor([pos], device=device), cache)
                return logits[:, -1:].argmax(-1).clone()
        first = out.logits[:, -1:].argmax(-1)
        return time_decode(torch, step, first, ctx, n_tokens, n_warmup)


def time_prefill(torch, transformers, model, config, n_prompt, reps, n_warmup, device):
    """ms of one forward over an n_prompt-token prompt into an empty cache, each of reps timed with CUDA events
    after n_warmup untimed ones (the first call picks cuBLAS and SDPA kernels for the shape)."""
    prompt = torch.randint(0, config.vocab_size, (1, n_prompt), device=device)

    def forward():
        cache = transformers.DynamicCache()
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1:].argmax(-1)

    with torch.inference_mode():
        for _ in range(n_warmup):
            forward()
        torch.cuda.synchronize()
        samples = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            forward()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    return samples


def copy_bandwidth(torch, device, gib=1.0, reps=10):
    """GB/s of a device-to-device copy, counting the bytes read and the bytes written."""
    n = int(gib * (1 << 30))
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ms = times[len(times) // 2]
    return {"source": "copy", "mode": "copy", "bytes": 2 * n, "ms_median": ms, "gb_per_s": 2 * n / (ms * 1e-3) / 1e9,
            "device": torch.cuda.get_device_name(device)}


def run_prefill(torch, transformers, model, config, prompts, reps, device, n_bytes):
    """One JSON line per prompt length; an error is a line of its own and exit status 1."""
    status = 0
    for n_prompt in prompts:
        t0 = time.time()
        record = {"source": "torch", "mode": "prefill", "test": f"pp{n_prompt}", "ctx": n_prompt}
        try:
            samples = time_prefill(torch, transformers, model, config, n_prompt, reps, 2, device)
        except Exception as e:  # report and go on with the other lengths
            print(json.dumps(dict(record, error=f"{type(e).__name__}: {e}"[:500])), flush=True)
            status = 1
            continue
        ms = sum(samples) / len(samples)
        print(json.dumps(dict(record, ms=ms, samples_ms=[round(t, 4) for t in samples], ms_per_token=ms / n_prompt,
                              tokens_per_s=n_prompt * 1e3 / ms, weight_bytes=n_bytes, n_tokens=n_prompt, reps=reps,
                              wall_s=round(time.time() - t0, 1))), flush=True)
    return status


def main():
    ap = argparse.ArgumentParser(description="PyTorch/transformers decode and prefill baseline for mk's synthetic "
                                             "Llama-3.2-1B")
    ap.add_argument("--modes", default="eager,compiled", help="comma list of eager, compiled, prefill, copy")
    ap.add_argument("--ctx", default="128,2048", help="comma list of prompt lengths (prefilled, then decode)")
    ap.add_argument("-n", "--n-tokens", type=int, default=64, help="timed decode tokens per (mode, ctx)")
    ap.add_argument("--warmup", type=int, default=8, help="untimed decode tokens before timing")
    ap.add_argument("--pp", default="512", help="prefill mode: comma list of prompt lengths, each one forward")
    ap.add_argument("--reps", type=int, default=5, help="prefill mode: timed forwards per prompt length")
    ap.add_argument("--copy-gib", type=float, default=1.0, help="copy mode: GiB per copy")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="print the config and the plan; import nothing")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    contexts = [int(c) for c in a.ctx.split(",") if c]
    prompts = [int(p) for p in a.pp.split(",") if p]
    for m in modes:
        if m not in ("eager", "compiled", "prefill", "copy"):
            ap.error(f"unknown mode '{m}'")
    if "prefill" in modes and (not prompts or min(prompts) < 1 or a.reps < 1):
        ap.error("prefill needs --pp lengths of at least 1 token and --reps of at least 1")

    if a.dry_run:
        print(json.dumps({"config": LLAMA_3_2_1B, "weight_bytes": weight_bytes_of_shape(LLAMA_3_2_1B),
                          "modes": modes, "ctx": contexts, "n_tokens": a.n_tokens, "warmup": a.warmup,
                          "pp": prompts, "reps": a.reps}))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("torch_baseline: error: torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    if "copy" in modes:
        print(json.dumps(copy_bandwidth(torch, device, a.copy_gib)), flush=True)
    modes = [m for m in modes if m != "copy"]
    if not modes:
        return 0

    import transformers

    t0 = time.time()
    model, config, n_bytes = build_model(torch, transformers, device)
    print(f"torch_baseline: built in {time.time() - t0:.1f} s: {n_bytes / 1e9:.3f} GB of bf16 weights; "
          f"torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr, flush=True)
    compiled_step = None
    if "compiled" in modes:
        cache = make_static_cache(transformers, config, max(contexts) + a.warmup + a.n_tokens + 1, device,
                                  torch.bfloat16)

        def one_token(token, position, cache):
            return model(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position).logits

        compiled_step = {"cache": cache, "fn": torch.compile(one_token, mode="reduce-overhead", fullgraph=False)}

    status = 0
    for mode in modes:
        if mode == "prefill":
            status |= run_prefill(torch, transformers, model, config, prompts, a.reps, device, n_bytes)
            continue
        for ctx in contexts:
            t0 = time.time()
            try:
                ms = run_mode(torch, transformers, model, config, mode, ctx, a.n_tokens, a.warmup, device,
                              compiled_step)
            except Exception as e:  # report and go on with the other cases
                print(json.dumps({"source": "torch", "mode": mode, "ctx": ctx, "error": f"{type(e).__name__}: {e}"[:500]}), flush=True)
                status = 1
                continue
            print(json.dumps({"source": "torch", "mode": mode, "ctx": ctx, "ms_per_token": ms, "tokens_per_s": 1e3 / ms,
                              "weight_bytes": n_bytes, "weight_gb_per_s": n_bytes / (ms * 1e-3) / 1e9,
                              "n_tokens": a.n_tokens, "wall_s": round(time.time() - t0, 1)}), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

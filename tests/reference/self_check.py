"""Self-check of the oracle: its KV-cache forward on tiny random models (GGUF and safetensors, llama/qwen2/qwen3)
equals a dense float64 forward written differently (full causal attention matrix, per-head loops, HF rotate-half);
adjacent-pair RoPE on GGUF-permuted Q/K equals rotate-half on the original; Q8_0/Q4_0/Q4_1 decode as documented."""
import math
import os
import sys
import tempfile

import numpy as np

import gguf
import oracle
import tiny_models as tm

Q = gguf.GGMLQuantizationType
TOL = 1e-10
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def dense_logits(cfg, w, inv_freq, tokens):
    """Whole-sequence forward, no cache: x (T, dim); every head computes its full (T, T) causal score matrix."""
    T, hd, nh, nkv, eps = len(tokens), cfg["head_dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["eps"]

    def norm(x, g):
        return x / np.sqrt((x ** 2).sum(-1, keepdims=True) / x.shape[-1] + eps) * g

    ang = np.outer(np.arange(T), inv_freq)
    cos, sin = np.cos(np.hstack([ang, ang])), np.sin(np.hstack([ang, ang]))  # (T, hd)

    def rotate(v):  # HF's q*cos + rotate_half(q)*sin
        return v * cos + np.hstack([-v[:, hd // 2:], v[:, :hd // 2]]) * sin

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["token_embd.weight"][tokens]
    for i in range(cfg["n_layers"]):
        p = f"blk.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        q, k, v = (h @ w[p + n + ".weight"].T + w.get(p + n + ".bias", 0.0) for n in ("attn_q", "attn_k", "attn_v"))
        heads = []
        for j in range(nh):
            kvh = j // (nh // nkv)
            qj, kj, vj = q[:, j * hd:(j + 1) * hd], k[:, kvh * hd:(kvh + 1) * hd], v[:, kvh * hd:(kvh + 1) * hd]
            if cfg["arch"] == "qwen3":
                qj, kj = norm(qj, w[p + "attn_q_norm.weight"]), norm(kj, w[p + "attn_k_norm.weight"])
            s = rotate(qj) @ rotate(kj).T / math.sqrt(hd) + mask
            e = np.exp(s - s.max(1, keepdims=True))
            heads.append((e / e.sum(1, keepdims=True)) @ vj)
        x = x + np.hstack(heads) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        g = h @ w[p + "ffn_gate.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    head = w.get("output.weight", w["token_embd.weight"])
    return norm(x, w["output_norm.weight"]) @ head.T


def base_inv_freq(cfg):
    return np.array([cfg["rope_base"] ** (-2 * i / cfg["head_dim"]) for i in range(cfg["head_dim"] // 2)])


def make(tmp, name, cfg, fmt, dtype, seed):
    """Writes a model; returns (path, stored weights, the inverse frequencies the file implies)."""
    w = tm.random_weights(cfg, seed)
    inv = base_inv_freq(cfg)
    if fmt == "gguf":
        cfg["eps"] = float(np.float32(cfg["eps"]))  # GGUF stores eps as f32; the dense side must use that value
        path = os.path.join(tmp, name + ".gguf")
        stored, div = tm.write_gguf(path, cfg, w, dtype)
        if div is not None:
            inv = inv / div
    else:
        path = os.path.join(tmp, name)
        stored = tm.write_safetensors_dir(path, cfg, w, dtype, shards=2 if cfg["rope_scaling"] else 1)
        if cfg["rope_scaling"]:
            inv = inv / tm.llama3_divisors(cfg)
    return path, stored, inv


CASES = [  # name, arch, format, dtype, config overrides
    ("llama-gguf-f32", "llama", "gguf", Q.F32, {}),
    ("llama-gguf-q4_1-llama3", "llama", "gguf", Q.Q4_1, {"rope_scaling": LLAMA3, "tied": False}),
    ("llama-gguf-f16-mha", "llama", "gguf", Q.F16, {"n_kv_heads": 4}),
    ("llama-st-bf16-llama3", "llama", "st", "BF16", {"rope_scaling": LLAMA3, "tied": False}),
    ("llama-st-f16", "llama", "st", "F16", {"n_kv_heads": 1}),
    ("qwen2-gguf-f32", "qwen2", "gguf", Q.F32, {"tied": False}),
    ("qwen2-st-bf16", "qwen2", "st", "BF16", {}),
    ("qwen3-gguf-q8_0", "qwen3", "gguf", Q.Q8_0, {}),
    ("qwen3-st-f32", "qwen3", "st", "F32", {"tied": False}),
]


def check_forward(tmp):
    ok = True
    tokens = [3, 17, 159, 0, 42, 42, 7, 100, 64, 5, 1, 150]
    for seed, (name, arch, fmt, dtype, over) in enumerate(CASES):
        cfg = tm.tiny_config(arch, **over)
        path, stored, inv = make(tmp, name, cfg, fmt, dtype, seed)
        want = dense_logits(cfg, stored, inv, tokens)
        model = oracle.Model(path)
        errs = []
        for chunk in (1, 5, len(tokens)):  # token by token, mixed, one prefill
            model.reset()
            errs.append(np.abs(model.prompt_logits(tokens, chunk) - want).max())
        model.reset()
        greedy = model.greedy(tokens[:4], 3)[1]
        model.reset()
        decode_ok = model.prompt_logits(tokens[:4] + greedy[:2], 1)[-1].argmax() == greedy[2]
        good = max(errs) < TOL and decode_ok
        ok &= good
        print(f"{'ok ' if good else 'BAD'} forward {name}: max |oracle - dense| = {max(errs):.2e} (chunks 1/5/all)"
              f"{'' if decode_ok else ', greedy decode disagrees with re-prefill'}")
    return ok


def check_rope_permutation(tmp):
    """One set of weights as GGUF llama (Q/K rows permuted, adjacent pairs) and as HF (rotate-half): same logits."""
    cfg = tm.tiny_config("llama", tied=False)
    w = tm.random_weights(cfg, 99)
    gpath = os.path.join(tmp, "perm.gguf")
    hpath = os.path.join(tmp, "perm-hf")
    tm.write_gguf(gpath, cfg, w, Q.F32)
    tm.write_safetensors_dir(hpath, cfg, w, "F32")
    tokens = [1, 2, 3, 50, 60, 70, 80, 90]
    g, h = oracle.Model(gpath), oracle.Model(hpath)
    styles = (g.cfg["rope_style"], h.cfg["rope_style"])
    err = np.abs(g.prompt_logits(tokens) - h.prompt_logits(tokens)).max()

    # The rotation itself: pairs on permuted rows == permuted (rotate-half on original rows).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 3, cfg["head_dim"]))  # (T, heads, head_dim)
    pos, inv = np.arange(6, dtype=np.float64) + 11, base_inv_freq(cfg)
    perm = tm.permute_rows_for_pairs(np.eye(cfg["head_dim"]), 1)  # row permutation of one head
    lhs = oracle.rope(x @ perm.T, pos, inv, "pairs")
    rhs = oracle.rope(x, pos, inv, "half") @ perm.T
    err2 = np.abs(lhs - rhs).max()
    good = err < TOL and err2 < 1e-13 and styles == ("pairs", "half")
    print(f"{'ok ' if good else 'BAD'} rope: GGUF {styles[0]} vs HF {styles[1]}: logits {err:.2e}, rotation {err2:.2e}")
    return good


def decode_blocks(data, qtype):
    """Decodes Q8_0 / Q4_0 / Q4_1 rows straight from REFERENCE.md's block layout (float64)."""
    block = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20}[qtype]
    b = data.reshape(-1, block)
    d = b[:, 0:2].copy().view("<f2").astype(np.float64)
    if qtype == Q.Q8_0:
        return (b[:, 2:].view(np.int8) * d).reshape(data.shape[0], -1)
    nib = b[:, 4:] if qtype == Q.Q4_1 else b[:, 2:]
    q = np.hstack([nib & 15, nib >> 4]).astype(np.float64)  # low nibbles are values 0-15, high 16-31
    vals = q * d + b[:, 2:4].copy().view("<f2").astype(np.float64) if qtype == Q.Q4_1 else (q - 8) * d
    return vals.reshape(data.shape[0], -1)


def check_quants():
    ok = True
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((16, 256)) * rng.uniform(0.01, 3, (16, 1))).astype(np.float32)
    blocks = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(blocks).max(1, keepdims=True)
    spread = blocks.max(1, keepdims=True) - blocks.min(1, keepdims=True)
    # Worst-case error per block: half a step (Q4_0's one-sided range can clip its far end by a full step),
    # plus the f16 rounding (2^-11) of the scale over all levels and of Q4_1's minimum.
    f16 = 2.0 ** -11
    bound = {Q.Q8_0: amax / 127 * (0.5 + 127 * f16), Q.Q4_0: amax / 8 * (1 + 8 * f16),
             Q.Q4_1: spread / 15 * (0.5 + 15 * f16) + amax * f16}
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        data = gguf.quants.quantize(x, qtype)
        lib = gguf.quants.dequantize(data, qtype).astype(np.float64)
        mine = decode_blocks(data, qtype)
        layout_err = np.abs(lib - mine).max() / np.abs(mine).max()
        excess = (np.abs(lib.reshape(-1, 32) - blocks) - bound[qtype]).max()
        good = lib.shape == x.shape and layout_err < 1e-6 and excess <= 0
        ok &= good
        print(f"{'ok ' if good else 'BAD'} quant {qtype.name}: gguf vs block-layout decode {layout_err:.1e}, "
              f"error within bound: {excess <= 0}")
    return ok


def main():
    with tempfile.TemporaryDirectory(prefix="mk-oracle-") as tmp:
        results = [check_forward(tmp), check_rope_permutation(tmp), check_quants()]
    print("self-check", "passed" if all(results) else "FAILED")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Independent float64 numpy reference for mk: loads a Llama / Qwen2 / Qwen3 model from a GGUF file or an
HF safetensors directory and computes logits with a KV cache. Shares no code with the C++ runtime.
CLI: `logits`, `greedy` and `info` subcommands write JSON (see main())."""
import argparse
import glob
import json
import math
import os
import struct
import sys

# One BLAS thread: on the shared 2-core CI box two threads spin against each other and against ctest -j
# (SmolLM2 greedy, 16 + 32 tokens: 13 s wall with 1 thread, 22 s with 2). Set the variable to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402  (after the thread setting, which BLAS reads at load)

ARCHS = ("llama", "qwen2", "qwen3")


# ---------------------------------------------------------------- model sources

class GgufSource:
    """Config and float64 tensors of a GGUF file, under GGUF's own tensor names."""

    def __init__(self, path):
        import gguf  # imported here so HF-only use needs no gguf package
        self.gguf = gguf
        self.path = path
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self.field("general.architecture")
        if arch not in ARCHS:
            raise ValueError(f"{path}: architecture {arch!r} is not one of {ARCHS}")

        def key(name, default=None):
            v = self.field(f"{arch}.{name}")
            if v is None and default is None:
                raise ValueError(f"{path}: missing metadata {arch}.{name}")
            return default if v is None else v

        dim, n_heads = int(key("embedding_length")), int(key("attention.head_count"))
        head_dim = int(key("attention.key_length", dim // n_heads))
        rope_dim = int(key("rope.dimension_count", head_dim))
        if rope_dim != head_dim:
            raise ValueError(f"{path}: partial RoPE ({rope_dim} of {head_dim}) is not supported")
        base = float(key("rope.freq_base", 10000.0))
        inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        scaling = "none"
        if "rope_freqs.weight" in self.tensors:
            # llama3 scaling: the converter stores one divisor per frequency.
            inv_freq = inv_freq / self.tensor("rope_freqs.weight")
            scaling = "rope_freqs"
        elif self.field(f"{arch}.rope.scaling.type") == "linear":
            inv_freq = inv_freq / float(key("rope.scaling.factor"))
            scaling = "linear"
        self.config = {
            "source": "gguf",
            "arch": arch,
            "n_layers": int(key("block_count")),
            "dim": dim,
            "n_heads": n_heads,
            "n_kv_heads": int(key("attention.head_count_kv", n_heads)),
            "head_dim": head_dim,
            "ffn_dim": int(key("feed_forward_length")),
            "vocab": int(self.tensors["token_embd.weight"].shape[1]),
            "eps": float(key("attention.layer_norm_rms_epsilon")),
            "rope_base": base,
            "rope_scaling": scaling,
            # llama.cpp rotates adjacent pairs for llama (the converter permutes Q/K rows to match);
            # qwen2/qwen3 files keep HF's rotate-half layout.
            "rope_style": "pairs" if arch == "llama" else "half",
            "tied_embeddings": "output.weight" not in self.tensors,
        }
        self.inv_freq = inv_freq

    def field(self, key):
        f = self.reader.fields.get(key)
        return None if f is None else f.contents()

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        t = self.tensors[name]
        x = self.gguf.quants.dequantize(t.data, t.tensor_type)
        want = tuple(int(d) for d in reversed(t.shape))  # GGUF dims are innermost first
        return np.asarray(x, dtype=np.float64).reshape(want)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


def decode_safetensors(raw, dtype, shape):
    """Raw little-endian bytes of one tensor -> float64 array."""
    if dtype == "F32":
        x = raw.view("<f4")
    elif dtype == "F16":
        x = raw.view("<f2")
    elif dtype == "BF16":
        # bf16 is the top half of an f32: widen the bits, then reinterpret.
        x = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(f"safetensors dtype {dtype} is not supported")
    return x.astype(np.float64).reshape(shape)


# HF parameter names -> GGUF names (the names used inside this oracle).
HF_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def hf_to_gguf_name(name):
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")
    if parts[:2] == ["model", "layers"] and len(parts) >= 5:
        stem, kind = ".".join(parts[3:-1]), parts[-1]
        if stem in HF_NAMES:
            return f"blk.{parts[2]}.{HF_NAMES[stem]}.{kind}"
    return None


class HfSource:
    """Config and float64 tensors of an HF directory (config.json + *.safetensors), under GGUF names."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}.get(
            (c.get("architectures") or [""])[0], c.get("model_type"))
        if arch not in ARCHS:
            raise ValueError(f"{path}: model type {arch!r} is not one of {ARCHS}")
        self.tensors = {}  # GGUF name -> (file, absolute offset, nbytes, dtype, shape)
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        if not files:
            raise ValueError(f"{path}: no *.safetensors files")
        for file in files:
            start, header = read_safetensors_header(file)
            for name, info in header.items():
                if name.endswith("rotary_emb.inv_freq"):
                    continue  # older checkpoints store RoPE frequencies; they follow from config.json
                g = hf_to_gguf_name(name)
                if g is None:
                    raise ValueError(f"{file}: unexpected tensor {name}")
                b, e = info["data_offsets"]
                self.tensors[g] = (file, start + b, e - b, info["dtype"], tuple(info["shape"]))

        dim, n_heads = c["hidden_size"], c["num_attention_heads"]
        head_dim = c.get("head_dim") or dim // n_heads
        base = float(c.get("rope_theta", 10000.0))
        inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        rs = c.get("rope_scaling") or {}
        kind = rs.get("rope_type", rs.get("type", "none"))
        if kind == "llama3":
            inv_freq = llama3_scale(inv_freq, rs)
        elif kind == "linear":
            inv_freq = inv_freq / float(rs["factor"])
        elif kind not in ("none", "default"):
            raise ValueError(f"{path}: rope_scaling type {kind!r} is not supported")
        self.config = {
            "source": "safetensors",
            "arch": arch,
            "n_layers": c["num_hidden_layers"],
            "dim": dim,
            "n_heads": n_heads,
            "n_kv_heads": c.get("num_key_value_heads") or n_heads,
            "head_dim": head_dim,
            "ffn_dim": c["intermediate_size"],
            "vocab": self.tensors["token_embd.weight"][4][0],
            "eps": float(c.get("rms_norm_eps", 1e-6)),
            "rope_base": base,
            "rope_scaling": "none" if kind == "default" else kind,
            "rope_style": "half",  # HF checkpoints always pair i with i + head_dim/2
            "tied_embeddings": "output.weight" not in self.tensors,
        }
        self.inv_freq = inv_freq

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        file, offset, nbytes, dtype, shape = self.tensors[name]
        raw = np.fromfile(file, dtype=np.uint8, count=nbytes, offset=offset)
        return decode_safetensors(raw, dtype, shape)


def llama3_scale(inv_freq, rs):
    """Llama 3.1 long-context scaling: long wavelengths slowed by `factor`, short ones kept, a smooth blend between."""
    factor, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    orig = float(rs["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = (orig / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return np.where(wavelen < orig / hi, inv_freq, np.where(wavelen > orig / lo, inv_freq / factor, blended))


def open_source(path):
    if os.path.isdir(path):
        return HfSource(path)
    return GgufSource(path)


# ---------------------------------------------------------------- math

def rms_norm(x, w, eps):
    return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, inv_freq, style):
    """Rotate x (T, n_heads, head_dim) at positions pos (T,): pairs (2i, 2i+1) or halves (i, i+d/2)."""
    ang = pos[:, None, None] * inv_freq[None, None, :]  # (T, 1, d/2)
    cos, sin = np.cos(ang), np.sin(ang)
    if style == "pairs":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if style == "pairs":
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., :h], out[..., h:] = ra, rb
    return out


# ---------------------------------------------------------------- model

class Model:
    """Float64 forward pass with a KV cache; weights are dequantized once, on first use."""

    def __init__(self, path):
        self.path = path
        self.src = open_source(path)
        self.cfg = self.src.config
        self.inv_freq = self.src.inv_freq
        self._w = {}
        self.reset()

    def w(self, name):
        if name not in self._w:
            self._w[name] = self.src.tensor(name)
        return self._w[name]

    def maybe(self, name):
        return self.w(name) if self.src.has(name) else None

    def reset(self):
        n = self.cfg["n_layers"]
        self.k_cache = [np.zeros((0, self.cfg["n_kv_heads"], self.cfg["head_dim"])) for _ in range(n)]
        self.v_cache = [np.zeros((0, self.cfg["n_kv_heads"], self.cfg["head_dim"])) for _ in range(n)]
        self.n_past = 0

    def attention(self, layer, x, pos):
        c = self.cfg
        p = f"blk.{layer}."
        T, hd, nh, nkv = x.shape[0], c["head_dim"], c["n_heads"], c["n_kv_heads"]
        proj = []
        for name, heads in (("attn_q", nh), ("attn_k", nkv), ("attn_v", nkv)):
            y = x @ self.w(p + name + ".weight").T
            bias = self.maybe(p + name + ".bias")  # Qwen2 (and HF llama with attention_bias)
            if bias is not None:
                y = y + bias
            proj.append(y.reshape(T, heads, hd))
        q, k, v = proj
        if c["arch"] == "qwen3":
            # Qwen3: RMSNorm over each head's vector before RoPE.
            q = rms_norm(q, self.w(p + "attn_q_norm.weight"), c["eps"])
            k = rms_norm(k, self.w(p + "attn_k_norm.weight"), c["eps"])
        q = rope(q, pos, self.inv_freq, c["rope_style"])
        k = rope(k, pos, self.inv_freq, c["rope_style"])
        self.k_cache[layer] = K = np.concatenate([self.k_cache[layer], k])  # (S, nkv, hd)
        self.v_cache[layer] = V = np.concatenate([self.v_cache[layer], v])
        S, group = K.shape[0], nh // nkv
        # GQA: query head h reads kv head h // group.
        qg = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3)            # (nkv, group, T, hd)
        scores = qg @ K.transpose(1, 2, 0)[:, None] / math.sqrt(hd)         # (nkv, group, T, S)
        causal = np.arange(S)[None, :] > pos[:, None]                       # key after query
        scores = np.where(causal, -np.inf, scores)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = probs @ V.transpose(1, 0, 2)[:, None]                         # (nkv, group, T, hd)
        out = out.transpose(2, 0, 1, 3).reshape(T, nh * hd)
        return out @ self.w(p + "attn_output.weight").T

    def forward(self, tokens):
        """Append tokens (processed together, causal) to the cache; returns their final-norm hidden states (T, dim)."""
        c = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= c["vocab"]:
            raise ValueError(f"token ids must be in [0, {c['vocab']})")
        pos = np.arange(self.n_past, self.n_past + len(tokens), dtype=np.float64)
        x = self.w("token_embd.weight")[tokens]
        for layer in range(c["n_layers"]):
            p = f"blk.{layer}."
            x = x + self.attention(layer, rms_norm(x, self.w(p + "attn_norm.weight"), c["eps"]), pos)
            h = rms_norm(x, self.w(p + "ffn_norm.weight"), c["eps"])
            gate = h @ self.w(p + "ffn_gate.weight").T
            up = h @ self.w(p + "ffn_up.weight").T
            x = x + (silu(gate) * up) @ self.w(p + "ffn_down.weight").T
        self.n_past += len(tokens)
        return rms_norm(x, self.w("output_norm.weight"), c["eps"])

    def lm_head(self, hidden):
        """Logits (T, vocab): one matmul for all positions; tied models reuse the embedding."""
        head = "token_embd.weight" if self.cfg["tied_embeddings"] else "output.weight"
        return hidden @ self.w(head).T

    def prompt_logits(self, tokens, chunk=1):
        """Logits at every position of tokens, fed `chunk` tokens at a time (1 = token by token)."""
        hidden = [self.forward(tokens[i:i + chunk]) for i in range(0, len(tokens), chunk)]
        return self.lm_head(np.concatenate(hidden))

    def greedy(self, prompt, n, chunk=1):
        """Prompt logits, then n greedy tokens. Returns (prompt logits, ids, final logits, top-2 gap per step)."""
        logits = self.prompt_logits(prompt, chunk)
        last = logits[-1]
        ids, gaps = [], []
        for step in range(n):
            top2 = np.partition(last, -2)[-2:]
            gaps.append(float(top2[1] - top2[0]))
            ids.append(int(np.argmax(last)))
            if step + 1 < n:
                last = self.lm_head(self.forward([ids[-1]]))[0]
        return logits, ids, last, gaps


# ---------------------------------------------------------------- CLI

def parse_tokens(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t]


def write_json(path, obj, logits=None):
    """JSON with full float64 precision; the logits also go to PATH.npy (shape (T, vocab), float64)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)
    if logits is not None:
        np.save(os.path.splitext(path)[0] + ".npy", logits)


def main(argv=None):
    """Outputs (every object also has "model": absolute path and "config": the `info` object):
    logits: {"tokens": [T ids], "logits": [T][vocab]} (+ OUT.npy: the same logits, float64 (T, vocab)).
    greedy: as logits for the prompt, plus "generated": [n ids], "final_logits": [vocab] (the logits whose argmax is
    generated[-1]) and "top2_gap": [n] (top-1 minus top-2 logit at each step; small gaps flag near-ties).
    info: {"source", "arch", "n_layers", "dim", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab", "eps",
    "rope_base", "rope_scaling", "rope_style": "pairs"|"half", "tied_embeddings"}."""
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("logits", "greedy", "info"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True, help="GGUF file or HF directory (config.json + *.safetensors)")
        p.add_argument("--out", help="JSON file to write (info: default stdout)", required=name != "info")
        p.add_argument("--skip-if-missing", action="store_true", help="exit 77 (CTest's skip) when MODEL is absent")
        if name != "info":
            p.add_argument("--tokens", required=True, help="comma-separated prompt ids")
            p.add_argument("--chunk", type=int, default=1, help="prompt tokens per forward call (default 1)")
        if name == "greedy":
            p.add_argument("--n", type=int, default=32, help="tokens to generate")
            p.add_argument("--expect", help="fail unless the continuation contains these ids in order, e.g. 7042")
    a = ap.parse_args(argv)

    if a.skip_if_missing and not os.path.exists(a.model):
        print(f"skipped: {a.model} not found (tools/setup.sh fetches it)")
        return 77
    model = Model(a.model)
    head = {"model": os.path.abspath(a.model), "config": model.cfg}
    if a.cmd == "info":
        text = json.dumps(head["config"], indent=1)
        if a.out:
            write_json(a.out, head["config"])
        else:
            print(text)
        return 0

    tokens = parse_tokens(a.tokens)
    if not tokens:
        ap.error("--tokens: at least one id")
    if a.cmd == "logits":
        logits = model.prompt_logits(tokens, a.chunk)
        write_json(a.out, {**head, "tokens": tokens, "logits": logits.tolist()}, logits)
        print(f"{a.out}: logits for {len(tokens)} positions, vocab {logits.shape[1]}")
        return 0

    logits, ids, final, gaps = model.greedy(tokens, a.n, a.chunk)
    write_json(a.out, {**head, "tokens": tokens, "logits": logits.tolist(), "generated": ids,
                       "final_logits": final.tolist(), "top2_gap": gaps}, logits)
    print(f"{a.out}: generated {ids}")
    if a.expect:
        want = parse_tokens(a.expect)
        if not any(ids[i:i + len(want)] == want for i in range(len(ids))):
            print(f"expected {want} in the continuation {ids}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

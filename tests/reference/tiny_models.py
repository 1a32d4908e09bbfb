"""Tiny random Llama/Qwen2/Qwen3 models written as GGUF (gguf.GGUFWriter) or HF safetensors directories, for
the oracle's self-check. Each writer returns the weights exactly as stored (float64, HF row order) so a dense
reference can run on the same numbers."""
import json
import math
import os
import struct

import numpy as np

import gguf

Q = gguf.GGMLQuantizationType


def tiny_config(arch, **over):
    cfg = {"arch": arch, "n_layers": 2, "dim": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
           "ffn_dim": 96, "vocab": 160, "eps": 1e-5, "rope_base": 10000.0, "rope_scaling": None, "tied": True}
    if arch == "qwen3":
        cfg["head_dim"] = 32  # Qwen3 decouples head_dim from dim / n_heads
    cfg.update(over)
    return cfg


def random_weights(cfg, seed):
    """HF-layout float64 weights under GGUF names; matrices ~ N(0, 1/in) so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    d, hd, nh, nkv, f, v = (cfg[k] for k in ("dim", "head_dim", "n_heads", "n_kv_heads", "ffn_dim", "vocab"))

    def mat(out, inp):
        return rng.standard_normal((out, inp)) / math.sqrt(inp)

    def norm(n):
        return 1.0 + 0.2 * rng.standard_normal(n)

    w = {"token_embd.weight": rng.standard_normal((v, d)), "output_norm.weight": norm(d)}
    if not cfg["tied"]:
        w["output.weight"] = mat(v, d)
    for i in range(cfg["n_layers"]):
        p = f"blk.{i}."
        w.update({p + "attn_norm.weight": norm(d), p + "ffn_norm.weight": norm(d),
                  p + "attn_q.weight": mat(nh * hd, d), p + "attn_k.weight": mat(nkv * hd, d),
                  p + "attn_v.weight": mat(nkv * hd, d), p + "attn_output.weight": mat(d, nh * hd),
                  p + "ffn_gate.weight": mat(f, d), p + "ffn_up.weight": mat(f, d), p + "ffn_down.weight": mat(d, f)})
        if cfg["arch"] == "qwen2":
            for name, n in (("attn_q", nh * hd), ("attn_k", nkv * hd), ("attn_v", nkv * hd)):
                w[p + name + ".bias"] = 0.3 * rng.standard_normal(n)
        if cfg["arch"] == "qwen3":
            w[p + "attn_q_norm.weight"] = norm(hd)
            w[p + "attn_k_norm.weight"] = norm(hd)
    return w


def llama3_divisors(cfg):
    """Per-frequency divisors of Llama 3 RoPE scaling, one frequency at a time as REFERENCE.md words it."""
    rs, hd = cfg["rope_scaling"], cfg["head_dim"]
    out = []
    for i in range(hd // 2):
        wavelength = 2 * math.pi / cfg["rope_base"] ** (-2 * i / hd)
        orig = rs["original_max_position_embeddings"]
        if wavelength < orig / rs["high_freq_factor"]:
            out.append(1.0)
        elif wavelength > orig / rs["low_freq_factor"]:
            out.append(rs["factor"])
        else:
            s = (orig / wavelength - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append(1.0 / ((1 - s) / rs["factor"] + s))
    return np.array(out)


def permute_rows_for_pairs(w, n_heads):
    """HF rotate-half row order -> GGUF llama order: within each head, row j*hd/2 + i moves to 2i + j."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def store(x, qtype):
    """Encode x for a GGUF tensor: (payload, raw dtype or None, the values a reader gets back as float64)."""
    if qtype == Q.F32:
        x32 = x.astype(np.float32)
        return x32, None, x32.astype(np.float64)
    if qtype == Q.F16:
        x16 = x.astype(np.float16)
        return x16, None, x16.astype(np.float64)
    data = gguf.quants.quantize(x.astype(np.float32), qtype)
    return data, qtype, gguf.quants.dequantize(data, qtype).astype(np.float64).reshape(x.shape)


def write_gguf(path, cfg, weights, qtype=Q.F32):
    """Matrices (incl. token_embd) in qtype, vectors in F32. Returns the stored weights (HF order) and divisors."""
    arch = cfg["arch"]
    wr = gguf.GGUFWriter(path, arch)
    for key, val in (("block_count", cfg["n_layers"]), ("context_length", 256), ("embedding_length", cfg["dim"]),
                     ("feed_forward_length", cfg["ffn_dim"]), ("attention.head_count", cfg["n_heads"]),
                     ("attention.head_count_kv", cfg["n_kv_heads"]), ("attention.key_length", cfg["head_dim"]),
                     ("attention.value_length", cfg["head_dim"]), ("rope.dimension_count", cfg["head_dim"])):
        wr.add_uint32(f"{arch}.{key}", val)
    wr.add_float32(f"{arch}.rope.freq_base", cfg["rope_base"])
    wr.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", cfg["eps"])
    stored = {}
    divisors = None
    if cfg["rope_scaling"]:
        payload, _, divisors = store(llama3_divisors(cfg), Q.F32)
        wr.add_tensor("rope_freqs.weight", payload)
    for name, x in weights.items():
        pairs = arch == "llama" and name.split(".")[-2] in ("attn_q", "attn_k")
        heads = cfg["n_heads"] if name.endswith("attn_q.weight") else cfg["n_kv_heads"]
        y = permute_rows_for_pairs(x, heads) if pairs else x
        payload, raw, back = store(y, qtype if x.ndim == 2 else Q.F32)
        wr.add_tensor(name, payload, raw_dtype=raw)
        # Undo the permutation so the returned weights are in HF order like the dense reference expects.
        stored[name] = unpermute_rows(back, heads) if pairs else back
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return stored, divisors


def unpermute_rows(w, n_heads):
    """Inverse of permute_rows_for_pairs."""
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_NAME = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
           "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
           "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_name(name):
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    _, layer, stem, kind = name.split(".")
    return f"model.layers.{layer}.{HF_NAME[stem]}.{kind}"


def to_bf16_bits(x):
    """Round float64 -> bf16 (nearest even), returned as uint16 bit patterns."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def write_safetensors_dir(path, cfg, weights, dtype="BF16", shards=1):
    """config.json + model-0000k.safetensors. Returns the stored weights as float64."""
    os.makedirs(path, exist_ok=True)
    arch = cfg["arch"]
    conf = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                               "qwen3": "Qwen3ForCausalLM"}[arch]], "model_type": arch,
            "hidden_size": cfg["dim"], "num_hidden_layers": cfg["n_layers"],
            "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
            "head_dim": cfg["head_dim"], "intermediate_size": cfg["ffn_dim"], "vocab_size": cfg["vocab"],
            "rms_norm_eps": cfg["eps"], "rope_theta": cfg["rope_base"], "tie_word_embeddings": cfg["tied"]}
    if cfg["rope_scaling"]:
        conf["rope_scaling"] = {"rope_type": "llama3", **cfg["rope_scaling"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    stored = {}
    names = list(weights)
    for k in range(shards):
        header, blobs, offset = {}, [], 0
        for name in names[k::shards]:
            x = weights[name]
            if dtype == "BF16":
                bits = to_bf16_bits(x)
                raw, back = bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32)
            else:
                arr = x.astype({"F32": "<f4", "F16": "<f2"}[dtype])
                raw, back = arr.tobytes(), arr
            stored[name] = back.astype(np.float64)
            header[hf_name(name)] = {"dtype": dtype, "shape": list(x.shape), "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)  # data section 8-byte aligned, as the format recommends
        with open(os.path.join(path, f"model-{k + 1:05d}-of-{shards:05d}.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    return stored

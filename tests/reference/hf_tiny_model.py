#!/usr/bin/env python3
"""A tiny random Llama written by HF transformers itself, and transformers' logits for it: the
reference for tests/cuda/hf_check_test.cpp ([cuda][hf], which reads MK_HF_DIR).

    hf_tiny_model.py OUT_DIR [--seed S]

OUT_DIR gets config.json + model.safetensors (LlamaForCausalLM.save_pretrained, float32, rotate-half
Q/K rows, llama3 rope scaling, untied LM head), a byte-level BPE tokenizer.json of 1024 tokens (mk's
loader requires one; the model is never fed text), and expected_logits.json: a fixed 16-token
sequence and transformers' logits at every position of it (teacher forcing, computed in float64 from
the stored float32 weights). Needs torch, transformers and numpy; no network.
"""
import argparse
import json
import os
import sys

VOCAB = 1024
CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=32,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    # original 64 scales most of the 16 frequency pairs, so mk's llama3 factors are exercised.
    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=64),
    tie_word_embeddings=False,
    hidden_act="silu",
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=None,
    eos_token_id=VOCAB - 1,
)
N_TOKENS = 16


def byte_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json():
    """256 byte tokens, 767 merges (Ġ+letter, letter pairs, Ġ+pair) and one special end token: 1024 ids."""
    alphabet = byte_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    merges = []

    def add(left, right):
        vocab[left + right] = len(vocab)
        merges.append(f"{left} {right}")

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    space = alphabet[ord(" ")]  # "Ġ"
    for c in letters:
        add(space, c)
    pairs = [a + b for a in letters for b in letters]
    for a in letters:
        for b in letters:
            add(a, b)
    for p in pairs:
        if len(vocab) == VOCAB - 1:
            break
        add(space + p[0], p[1])
    assert len(vocab) == VOCAB - 1
    end = "<|end_of_text|>"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": VOCAB - 1, "content": end, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }, end


def randomize(torch, model, seed):
    """Weights that make every layer matter: matrices ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1^2),
    embedding ~ N(0, 1). transformers' own init (std 0.02) would leave the layers nearly silent."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[1] ** 0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import numpy as np
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    os.makedirs(a.out_dir, exist_ok=True)
    config = transformers.LlamaConfig(**CONFIG)
    torch.manual_seed(a.seed)
    model = transformers.LlamaForCausalLM(config).to(torch.float32).eval()
    randomize(torch, model, a.seed)
    model.save_pretrained(a.out_dir, safe_serialization=True)

    tok, end = tokenizer_json()
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": end, "add_bos_token": False, "model_max_length": CONFIG["max_position_embeddings"],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    try:  # the tokenizer file must load in HF's own reader too
        import tokenizers

        ids = tokenizers.Tokenizer.from_file(os.path.join(a.out_dir, "tokenizer.json")).encode("hello world").ids
        assert ids and max(ids) < VOCAB, ids
    except ImportError:
        pass

    # Reference: reload what was saved (so the float32 file is what is compared), run in float64.
    saved = transformers.LlamaForCausalLM.from_pretrained(a.out_dir).to(torch.float64).eval()
    rng = np.random.default_rng(a.seed)
    tokens = [int(t) for t in rng.integers(0, VOCAB - 1, size=N_TOKENS)]
    with torch.no_grad():
        logits = saved(input_ids=torch.tensor([tokens]), use_cache=False).logits[0]  # (N_TOKENS, VOCAB)
    assert torch.isfinite(logits).all()
    with open(os.path.join(a.out_dir, "expected_logits.json"), "w", encoding="utf-8") as f:
        json.dump({"model": "hf-tiny-llama", "seed": a.seed, "dtype": "float64 from float32 weights",
                   "transformers": transformers.__version__, "torch": torch.__version__, "tokens": tokens,
                   "logits": [[float(v) for v in row] for row in logits.tolist()]}, f)
    print(f"hf_tiny_model: wrote {a.out_dir}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{N_TOKENS} positions of logits (transformers {transformers.__version__}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

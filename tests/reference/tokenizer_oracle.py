"""Tokenizer oracle: builds a Hugging Face `tokenizers` byte-level BPE from a GGUF file's own vocabulary
and merges (SmolLM2's `smollm` pre-tokenizer: every digit alone, then the GPT-2 pattern) and writes the
ids of a fixed list of test strings as JSON: {"model": path, "cases": [{"text": ..., "ids": [...]}]}."""
import argparse
import json
import os
import sys

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3  # tokenizer.ggml.token_type value of control tokens such as <|im_start|>

# Published ids (HF tokenizer of SmolLM2); a tokenizer that misses them must not write an oracle file.
KNOWN = {
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
    "Hello, we can use": [19556, 28, 392, 416, 722],
}

CASES = [
    "The capital of France is",
    "Hello world! 123",
    "Hello, we can use",
    "",
    " ",
    "a",
    "Hello",
    " Hello",
    "  Hello  world  ",
    "12345678901234567890",
    "3.14159 and 2,718 and -42",
    "year 2024: 1,000,000 people",
    "\t\ttabs\tand\nnewlines\n\n\nend",
    "trailing spaces   \n   leading",
    "\n",
    "   ",
    "line one\r\nline two",
    "café naïve résumé Ångström",
    "Crème brûlée coûte 5€",
    "emoji 😀🎉 and 👍🏽 and 🇫🇷",
    "中文测试：你好，世界！",
    "日本語のテキストとカタカナ",
    "한국어 텍스트",
    "Привет, мир! Ελληνικά",
    "mixed: English, 中文, العربية, हिन्दी 42",
    "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "<|endoftext|>",
    "text<|im_end|>more text",
    "it's don't we're they've I'm you'll he'd",
    "IT'S DON'T WE'RE",
    "'s 't 're",
    "Wait... what?!?! (really) [yes] {no} <tag>",
    "!!!???...,,,;;;",
    "#include <stdio.h>\nint main() { return 0; }",
    "def f(x):\n    return x ** 2  # square",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com +1-555-0100",
    "snake_case camelCase PascalCase kebab-case",
    "A" * 64,
    "ÿþ\u00a0non-breaking\u2009thin\u200bzero-width",
    "Tokens: <|im_start|> inside <|im_end|> a sentence",
]


def default_model() -> str:
    cache = os.environ.get("MK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mk")
    return os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")


def field(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def build_tokenizer(path: str) -> Tokenizer:
    reader = gguf.GGUFReader(path)
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise SystemExit(f"{path}: only byte-level BPE (tokenizer.ggml.model = gpt2) is supported")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = field(reader, "tokenizer.ggml.pre")
    # smollm/starcoder: every digit is its own piece before the GPT-2 byte-level split.
    steps = [pre_tokenizers.Split(Regex(r"\p{N}"), "isolated")] if pre in ("smollm", "starcoder") else []
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    # Control tokens already have ids in the vocabulary; registering them makes "<|im_start|>" in text match them whole.
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == CONTROL])
    return tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=default_model(), help="GGUF file with a byte-level BPE tokenizer")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--check-known", action=argparse.BooleanOptionalAction, default=True,
                    help="require the published SmolLM2 ids for a few strings")
    ap.add_argument("--skip-if-missing", action="store_true", help="exit 77 (CTest's skip) when MODEL is absent")
    args = ap.parse_args()

    if args.skip_if_missing and not os.path.exists(args.model):
        print(f"skipped: {args.model} not found (tools/setup.sh fetches it)")
        return 77
    tok = build_tokenizer(args.model)
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in CASES]
    for case in cases:
        # Byte-level BPE is lossless: decoding must give the text back exactly.
        back = tok.decode(case["ids"], skip_special_tokens=False)
        if back != case["text"]:
            print(f"round trip failed: {case['text']!r} -> {case['ids']} -> {back!r}", file=sys.stderr)
            return 1
    if args.check_known:
        by_text = {c["text"]: c["ids"] for c in cases}
        for text, want in KNOWN.items():
            if by_text[text] != want:
                print(f"{text!r}: got {by_text[text]}, published {want}", file=sys.stderr)
                return 1

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.abspath(args.model), "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"{args.out}: {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Perplexity oracle: llama.cpp's `llama-perplexity` method over a text with the float64 forward of
oracle.py (each chunk as one causal batch) and the text tokenized by tokenizer_oracle.py's HF tokenizer,
so nothing of mk's is used. `oracle` writes the JSON; `check` runs `mk perplexity` on the same text and
chunks and compares the final estimate (relative tolerance, default 0.5%).
JSON: {"model", "text", "ctx", "n_tokens", "n_chunks", "running": [ppl after each chunk], "ppl", "ppl_error"}."""
import argparse
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import oracle  # noqa: E402


def perplexity(model_path, text, ctx, max_chunks):
    from tokenizer_oracle import build_tokenizer
    tok = build_tokenizer(model_path)
    tokens = tok.encode(text).ids  # byte-level BPE files of this family add no BOS
    if len(tokens) < 2 * ctx:
        raise SystemExit(f"{len(tokens)} tokens; a context of {ctx} needs at least {2 * ctx}")
    n_chunks = len(tokens) // ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    model = oracle.Model(model_path)
    first = ctx // 2
    nlls, running = [], []
    for c in range(n_chunks):
        chunk = tokens[c * ctx:(c + 1) * ctx]
        model.reset()
        logits = model.lm_head(model.forward(chunk))           # (ctx, vocab) float64
        z = logits[first:ctx - 1]
        m = z.max(axis=1, keepdims=True)
        log_norm = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        nlls.extend((log_norm - z[np.arange(len(z)), chunk[first + 1:ctx]]).tolist())
        running.append(math.exp(float(np.mean(nlls))))
        print(f"[{c + 1}]{running[-1]:.4f},", end="", flush=True)
    nll = np.array(nlls)
    ppl = math.exp(nll.mean())
    err = ppl * math.sqrt(nll.var() / (len(nll) - 1))
    print(f"\nFinal estimate: PPL = {ppl:.4f} +/- {err:.5f}")
    return {"ctx": ctx, "n_tokens": len(tokens), "n_chunks": n_chunks, "running": running, "ppl": ppl,
            "ppl_error": err}


def check(a):
    with open(a.oracle) as f:
        want = json.load(f)
    cmd = [a.mk, "perplexity", "-m", want["model"], "-f", want["text"], "-c", str(want["ctx"]),
           "--chunks", str(want["n_chunks"])] + a.mk_args
    print(" ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    print(out.stdout)
    if out.returncode != 0:
        return 1
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out.stdout)]
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out.stdout)
    if not final or len(running) != want["n_chunks"]:
        print(f"mk printed {len(running)} running values (want {want['n_chunks']}) or no final estimate")
        return 1
    ok = True
    for k, (got, ref) in enumerate(zip(running + [float(final.group(1))], want["running"] + [want["ppl"]])):
        rel = abs(got - ref) / ref
        name = f"chunk {k + 1}" if k < len(running) else "final"
        print(f"{name}: mk {got:.4f} oracle {ref:.4f} relative difference {rel:.2e}")
        ok &= rel <= a.tol
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("oracle")
    o.add_argument("--model", required=True)
    o.add_argument("--text", required=True)
    o.add_argument("--ctx", type=int, default=128)
    o.add_argument("--chunks", type=int)
    o.add_argument("--out", required=True)
    o.add_argument("--skip-if-missing", action="store_true", help="exit 77 (CTest's skip) when MODEL is absent")
    c = sub.add_parser("check")
    c.add_argument("--mk", required=True)
    c.add_argument("--oracle", required=True, help="the JSON `oracle` wrote")
    c.add_argument("--tol", type=float, default=5e-3)
    c.add_argument("mk_args", nargs="*", help="more mk options (after --)")
    a = ap.parse_args()
    if a.cmd == "check":
        if not os.path.exists(a.oracle):
            print(f"skipped: {a.oracle} is missing (its oracle was skipped)")
            return 77
        return check(a)
    if a.skip_if_missing and not os.path.exists(a.model):
        print(f"skipped: {a.model} not found (tools/setup.sh fetches it)")
        return 77
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    result = perplexity(a.model, text, a.ctx, a.chunks)
    oracle.write_json(a.out, {"model": os.path.abspath(a.model), "text": os.path.abspath(a.text), **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic-model oracle fixtures. `make`: `mk synth SPEC -o MODEL`, then the oracle's logits at every position of
a fixed token list (+ a few greedy tokens) into OUT_DIR/oracle_NAME.json (+ .npy), with the model path and spec.
`compare`: two such outputs of one model written in two formats must agree (format conventions end to end)."""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import oracle

# Fixed prompt, taken modulo the vocabulary so one list fits every shape; repeats exercise the cache.
BASE_TOKENS = [1, 2, 3, 17, 100, 255, 7, 42, 42, 1000, 4095, 31, 500, 9]


def make(a):
    hf = "format=safetensors" in a.spec.split(":")
    model_dir = os.path.join(a.out_dir, "synthetic")
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, a.name if hf else a.name + ".gguf")
    t0 = time.perf_counter()
    subprocess.run([a.mk, "synth", a.spec, "-o", path], check=True)
    t1 = time.perf_counter()

    model = oracle.Model(path)
    tokens = [t % model.cfg["vocab"] for t in BASE_TOKENS]
    logits, generated, final, gaps = model.greedy(tokens, a.greedy)
    out = os.path.join(a.out_dir, f"oracle_{a.name}.json")
    oracle.write_json(out, {"model": os.path.abspath(path), "spec": a.spec, "config": model.cfg, "tokens": tokens,
                            "logits": logits.tolist(), "generated": generated, "final_logits": final.tolist(),
                            "top2_gap": gaps}, logits)
    t2 = time.perf_counter()
    print(f"{out}: {model.cfg['arch']} {model.cfg['source']} vocab {model.cfg['vocab']}, "
          f"{len(tokens)} positions, greedy {generated}; synth {t1 - t0:.1f} s, oracle {t2 - t1:.1f} s")
    return 0


def compare(a):
    logits = []
    for name in a.names:
        with open(os.path.join(a.out_dir, f"oracle_{name}.json")) as f:
            logits.append(np.array(json.load(f)["logits"]))
    err = np.abs(logits[0] - logits[1]).max() / np.abs(logits[0]).max()
    print(f"{a.names[0]} vs {a.names[1]}: max relative logit difference {err:.2e} (tolerance {a.tol:g})")
    return 0 if err <= a.tol else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--mk", required=True, help="the mk executable")
    m.add_argument("--name", required=True, help="fixture name: oracle_NAME.json, synthetic/NAME[.gguf]")
    m.add_argument("--spec", required=True, help="e.g. synthetic:tiny-llama:q4_1:format=gguf")
    m.add_argument("--greedy", type=int, default=8, help="greedy tokens to add after the prompt")
    c = sub.add_parser("compare")
    c.add_argument("names", nargs=2, help="two fixture names")
    c.add_argument("--tol", type=float, required=True, help="largest allowed max|a-b| / max|a|")
    for p in (m, c):
        p.add_argument("--out-dir", required=True, help="the test data folder")
    a = ap.parse_args()
    return make(a) if a.cmd == "make" else compare(a)


if __name__ == "__main__":
    sys.exit(main())

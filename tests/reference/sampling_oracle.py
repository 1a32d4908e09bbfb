"""Independent reference for mk's sampling rule (instructions/sample/sampling.hpp), numpy only, sharing no
code with the C++: Philox4x32-10 from the published algorithm (Salmon et al., SC'11, checked against the
Random123 known-answer vectors) and the documented rule, written as plain loops. Writes JSON cases
(logits, params, history, seed, position -> token) that tests/runtime/api_test.cpp replays through
sample_token.

The rule: repetition penalty on the distinct ids of the last repeat_last_n history tokens (fp32: a positive
logit divided by the penalty, a negative one multiplied); temperature 0 is argmax (lowest id wins ties);
otherwise candidates in descending logit order (ties by ascending id), the first top_k of them, softmax of
logit/temperature in float64, min-p drops the tail below min_p * p_max, top-p keeps the shortest prefix
whose mass reaches top_p (at least one), and the token is the first whose cumulative probability exceeds
u * kept_mass with u = philox_uniform(seed, position)."""
import argparse
import json
import math

import numpy as np

MASK32 = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # Weyl key increments (golden ratio, sqrt(3) - 1)

# Random123 kat_vectors, philox4x32 with 10 rounds: (counter, key) -> output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox4x32_10(counter, key):
    """Ten rounds of the Philox S-box; round r uses key + r * W."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = PHILOX_M[0] * c0
        p1 = PHILOX_M[1] * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0 = (k0 + PHILOX_W[0]) & MASK32
        k1 = (k1 + PHILOX_W[1]) & MASK32
    return c0, c1, c2, c3


def philox_uniform(seed, step, index=0):
    """mk's draw: counter (step lo, step hi, index, 'mk\\0\\0'), key = seed; 53 bits mixed from two words."""
    v = philox4x32_10((step & MASK32, step >> 32, index, 0x6D6B0000), (seed & MASK32, seed >> 32))
    bits = ((v[0] << 21) ^ (v[1] >> 11) ^ (v[1] << 32)) & ((1 << 53) - 1)
    return bits / float(1 << 53)


def f32(x):
    return np.float32(x)


def sample(logits, params, history, position):
    z = [f32(v) for v in logits]
    vocab = len(z)
    penalty = f32(params["repeat_penalty"])
    if penalty != f32(1.0) and history:
        start = max(0, len(history) - params["repeat_last_n"])
        for i in sorted(set(history[start:])):
            if 0 <= i < vocab:
                z[i] = z[i] / penalty if z[i] > 0 else z[i] * penalty  # fp32 arithmetic
    if params["temperature"] <= 0:
        best = 0
        for i in range(1, vocab):
            if z[i] > z[best]:
                best = i
        return best
    ids = sorted(range(vocab), key=lambda i: (-float(z[i]), i))
    n = vocab
    if 0 < params["top_k"] < vocab:
        n = params["top_k"]
    ids = ids[:n]
    t = float(f32(params["temperature"]))
    top = float(z[ids[0]]) / t
    p = [math.exp(float(z[i]) / t - top) for i in ids]
    total = 0.0
    for v in p:
        total += v
    p = [v / total for v in p]
    if params["min_p"] > 0:
        floor = float(f32(params["min_p"])) * p[0]
        while n > 1 and p[n - 1] < floor:
            n -= 1
    if params["top_p"] < 1:
        top_p = float(f32(params["top_p"]))
        cum, keep = 0.0, 0
        while keep < n and cum < top_p:
            cum += p[keep]
            keep += 1
        n = max(keep, 1)
    kept = 0.0
    for i in range(n):
        kept += p[i]
    u = philox_uniform(params["seed"], position) * kept
    cum = 0.0
    for i in range(n):
        cum += p[i]
        if u < cum:
            return ids[i]
    return ids[n - 1]


FILTERS = {  # name -> params drawn for it (the others stay off)
    "greedy": lambda r: {"temperature": 0.0},
    "greedy_penalty": lambda r: {"temperature": 0.0, "repeat_penalty": r.choice([1.1, 1.5, 3.0])},
    "temperature": lambda r: {"temperature": r.choice([0.05, 0.5, 0.8, 1.0, 1.7, 5.0])},
    "top_k": lambda r: {"temperature": 0.8, "top_k": int(r.choice([1, 2, 3, 10, 40, 5000]))},
    "top_p": lambda r: {"temperature": 0.8, "top_p": r.choice([0.01, 0.3, 0.5, 0.9, 0.95, 0.999])},
    "min_p": lambda r: {"temperature": 0.8, "min_p": r.choice([0.01, 0.05, 0.1, 0.5, 1.0])},
    "repeat_penalty": lambda r: {"temperature": 0.8, "repeat_penalty": r.choice([0.8, 1.1, 1.3, 2.0]),
                                 "repeat_last_n": int(r.choice([0, 1, 8, 64]))},
    "combined": lambda r: {"temperature": r.choice([0.3, 0.7, 1.0, 1.5]), "top_k": int(r.choice([0, 5, 40])),
                           "top_p": r.choice([1.0, 0.9, 0.6]), "min_p": r.choice([0.0, 0.05, 0.2]),
                           "repeat_penalty": r.choice([1.0, 1.2]), "repeat_last_n": 16},
}


def make_case(rng, name, index):
    vocab = int(rng.choice([2, 5, 17, 64, 257, 1000]))
    logits = (rng.standard_normal(vocab) * rng.choice([0.5, 2.0, 6.0])).astype(np.float32)
    if index % 4 == 0:  # ties: a few values repeated, so the id order decides
        logits = rng.choice(logits[: max(2, vocab // 8)], vocab).astype(np.float32)
    history = [int(h) for h in rng.integers(-2, vocab + 2, int(rng.integers(0, 40)))]
    params = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
              "repeat_last_n": 64, "seed": int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))}
    params.update(FILTERS[name](rng))
    for k in ("temperature", "top_p", "min_p", "repeat_penalty"):
        params[k] = float(f32(params[k]))  # exactly what the C++ float holds
    position = int(rng.choice([0, 1, int(rng.integers(0, 4096)), int(rng.integers(0, 2**31 - 1))]))
    logits_list = [float(v) for v in logits]
    token = sample(logits_list, params, history, position)
    return {"name": name, "logits": logits_list, "params": params, "history": history, "position": position,
            "token": token}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-filter", type=int, default=60)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    for counter, key, want in PHILOX_KAT:
        got = philox4x32_10(counter, key)
        assert got == want, f"philox4x32_10{counter, key} = {[hex(v) for v in got]}, want {[hex(v) for v in want]}"
    rng = np.random.default_rng(args.seed)
    cases = [make_case(rng, name, i) for name in FILTERS for i in range(args.per_filter)]
    draws = []
    for _ in range(64):
        seed, step = int(rng.integers(0, 2**64, dtype=np.uint64)), int(rng.integers(0, 2**40))
        draws.append({"seed": seed, "step": step, "uniform": philox_uniform(seed, step)})
    with open(args.out, "w") as f:
        json.dump({"cases": cases, "philox_uniform": draws}, f)
    print(f"sampling oracle: {len(cases)} cases, {len(draws)} uniform draws -> {args.out}")


if __name__ == "__main__":
    main()

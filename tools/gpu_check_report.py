#!/usr/bin/env python3
"""tools/gpu-check.sh's bookkeeping: turns `mk bench -o json` output into JSON lines, and prints the
closing tables (stage results; ms/token, tokens/s and share of the measured copy bandwidth).

    gpu_check_report.py wrap-mk FILE --dtype D --flags "F" --ctx-map pp512=512,tg128=128 --command "mk bench ..."
    gpu_check_report.py summary BENCH_JSONL STAGES_TSV
    gpu_check_report.py results BENCH_JSONL --date D --commit C --device NAME --model SHAPE   (or --header-only)
    gpu_check_report.py compare BENCH_JSONL [--dtype bf16 --ctx 128 --pp 512]
    gpu_check_report.py self-test      the commands above on canned records, against figures worked by hand

`results` prints rows in bench/RESULTS.md's GPU table format, so recording a run is one paste.

BENCH_JSONL holds one JSON object per line: {"source": "copy", "gb_per_s"}, {"source": "mk", "test", ...},
{"source": "torch", "mode", "ctx", "ms_per_token", "weight_bytes"} and a torch prefill's {"source": "torch",
"mode": "prefill", "test": "ppP", "ctx": P, "ms", "ms_per_token", ...}. STAGES_TSV: stage, status, seconds.
A ppN record (mk or torch) has no weight GB/s: its weights are read once per prefill chunk, not per token.
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile


def wrap_mk(a):
    try:
        rows = json.load(open(a.file))
    except (OSError, ValueError):
        print(json.dumps({"source": "mk", "dtype": a.dtype, "flags": a.flags,
                          "error": "mk bench failed (gpu-check.log has its message)"}))
        return 1
    ctx_of = dict(item.split("=") for item in a.ctx_map.split(",") if item)
    for r in rows:
        tps = r["tokens_per_s"]
        out = {"source": "mk", "dtype": a.dtype, "flags": a.flags, "test": r["test"],
               "ctx": int(ctx_of.get(r["test"], r.get("n_tokens", 0))), "tokens_per_s": tps,
               "tokens_per_s_sd": r.get("tokens_per_s_sd"), "ms_per_token": 1e3 / tps if tps else None,
               "weight_bytes": r["weight_gb_per_s"] * 1e9 / tps if tps else None, "backend": r.get("backend"),
               "sms": r.get("sms"), "samples": r.get("samples"), "command": a.command}
        print(json.dumps(out))
    return 0


def fmt_num(v, spec):
    return "-" if v is None else format(v, spec)


def read_records(path):
    records = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    copy = next((r for r in records if r.get("source") == "copy" and r.get("gb_per_s")), None)
    return records, copy


def is_prefill(r):
    return str(r.get("test", "")).startswith("pp")


def ms_spec(r):
    """ms/token to 3 decimals, 4 for a prompt (pp512 runs at ~0.01 ms/token on an H200)."""
    return ".4f" if is_prefill(r) else ".3f"


def runner_name(r):
    if r.get("source") == "mk":
        return ("mk " + r.get("flags", "")).strip()
    return "torch eager prefill" if r.get("mode") == "prefill" else f"torch {r.get('mode', '?')}"


def rates(r, copy_gbs):
    """ms/token, weight GB/s and % of the copy bandwidth of one mk or torch record (decode only for the last two)."""
    ms, wb = r.get("ms_per_token"), r.get("weight_bytes")
    gbs = wb / (ms * 1e-3) / 1e9 if ms and wb and not is_prefill(r) else None
    return ms, gbs, 100 * gbs / copy_gbs if gbs and copy_gbs else None


# bench/RESULTS.md's GPU table: one row per measurement.
RESULTS_HEADER = ("| date | commit | device | model | weights | ctx | backend | ms/token | tokens/s | GB/s "
                  "| % of copy | command |\n"
                  "| --- | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- |")


def results(a):
    print(RESULTS_HEADER)
    if a.header_only:
        return 0
    records, copy = read_records(a.bench)
    copy_gbs = copy["gb_per_s"] if copy else None
    for r in records:
        src = r.get("source")
        if src not in ("mk", "torch") or r.get("error"):
            continue
        backend = runner_name(r)
        if src == "mk":
            weights, command = r.get("dtype", "?"), r.get("command") or backend
        elif r.get("mode") == "prefill":
            weights, command = "bf16", f"python3 bench/torch_baseline.py --modes prefill --pp {r.get('ctx', '?')}"
        else:
            weights = "bf16"
            command = f"python3 bench/torch_baseline.py --modes {r.get('mode', '?')} --ctx {r.get('ctx', '?')}"
        ms, gbs, pct = rates(r, copy_gbs)
        print(f"| {a.date} | {a.commit} | {a.device} | {a.model} | {weights} | {r.get('ctx', '-')} | {backend} | "
              f"{fmt_num(ms, ms_spec(r))} | {fmt_num(r.get('tokens_per_s'), '.1f')} | {fmt_num(gbs, '.0f')} | "
              f"{fmt_num(pct, '.1f')} | `{command}` |")
    return 0


def summary(a):
    records, copy = read_records(a.bench)
    copy_gbs = copy["gb_per_s"] if copy else None

    print("| stage | result | seconds |")
    print("| --- | --- | ---: |")
    try:
        for line in open(a.stages):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                print(f"| {parts[0]} | {parts[1]} | {parts[2]} |")
    except OSError:
        pass
    print()
    if copy_gbs:
        print(f"copy bandwidth (torch, read + write): {copy_gbs:.0f} GB/s on {copy.get('device', '?')}")
    else:
        print("copy bandwidth: not measured; the % column is empty")
    print()
    print("| runner | dtype | ctx | ms/token | tokens/s | weight GB/s | % of copy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in records:
        src = r.get("source")
        if src not in ("mk", "torch"):
            continue
        name, dtype = runner_name(r), r.get("dtype", "?") if src == "mk" else "bf16"
        if r.get("error"):
            print(f"| {name} | {dtype} | {r.get('ctx', '-')} | error: {r['error'][:60]} | | | |")
            continue
        ms, gbs, pct = rates(r, copy_gbs)
        print(f"| {name} | {dtype} | {r.get('ctx', '-')} | {fmt_num(ms, ms_spec(r))} | "
              f"{fmt_num(r.get('tokens_per_s'), '.1f')} | {fmt_num(gbs, '.0f')} | {fmt_num(pct, '.1f')} |")
    print()
    print("mk: mean over positions 0..ctx-1 (mk bench ppN/tgN); torch: decode tokens after a ctx-token prefill; "
          "torch eager prefill: one forward over a ctx-token prompt. ppN rows have no GB/s (weights are read once "
          "per chunk).")
    return 0


# The baselines the megakernel is held against, by mk's backend names: decode (tgN; issue 20: >= 1.2x over
# graphs+PDL) and a prompt (ppN; issue 21), each test's torch row last. The megakernel's row is each test's first.
COMPARE_MK = (
    ("megakernel (mk --backend cuda)", "cuda"),
    ("graphs+PDL (mk --backend cuda-kernels --graph)", "cuda-kernels-graph+pdl"),
    ("kernels+PDL (mk --backend cuda-kernels)", "cuda-kernels+pdl"),
)
COMPARE_TORCH = {"tg": ("torch eager (bench/torch_baseline.py)", "eager"),
                 "pp": ("torch eager prefill (bench/torch_baseline.py --modes prefill)", "prefill")}
COMPARE_TARGET = 1.2


def compare_rows(records, dtype, kind, ctx):
    """(runner, record or None) for one test (kind tg or pp at ctx tokens): the last matching record, so the bench
    stage's own row is taken over an earlier stage's (forward's pp512)."""
    def last(match):
        found = [r for r in records if match(r) and not r.get("error") and r.get("ctx") == ctx]
        return found[-1] if found else None
    # An emulated backend names itself with "-emu" (a rehearsal's rows): the same runner.
    rows = [(name, last(lambda r, b=backend: r.get("source") == "mk" and
                        str(r.get("backend", "")).replace("-emu", "") == b and
                        r.get("dtype") == dtype and str(r.get("test", "")).startswith(kind)))
            for name, backend in COMPARE_MK]
    name, mode = COMPARE_TORCH[kind]
    rows.append((name, last(lambda r: r.get("source") == "torch" and r.get("mode") == mode)))
    return rows


def compare(a):
    """One table: each runner's ms/token for decode (tg) and a prompt (pp) at one dtype, and the megakernel's
    speed-up over it within each test."""
    records, _ = read_records(a.bench)
    tests = [(f"tg{a.ctx}", compare_rows(records, a.dtype, "tg", a.ctx), ".3f")]
    if a.pp:
        tests.append((f"pp{a.pp}", compare_rows(records, a.dtype, "pp", a.pp), ".4f"))
    print(f"baseline comparison, {a.dtype}, one run, the same shape: tg{a.ctx} (decode at ctx {a.ctx})"
          f"{f' and pp{a.pp} (a prompt of {a.pp} tokens)' if a.pp else ''}{': ' + a.note if a.note else ''}:")
    print("| test | runner | ms/token | tokens/s | ms per prompt | megakernel speed-up |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for test, rows, ms_spec in tests:
        mega = rows[0][1].get("ms_per_token") if rows[0][1] else None
        for name, r in rows:
            ms = r.get("ms_per_token") if r else None
            ratio = ms / mega if ms and mega else None
            prompt_ms = ms * r["ctx"] if ms and test.startswith("pp") else None
            print(f"| {test} | {name} | {fmt_num(ms, ms_spec) if ms else 'not measured'} | "
                  f"{fmt_num(1e3 / ms if ms else None, '.1f')} | {fmt_num(prompt_ms, '.2f')} | "
                  f"{fmt_num(ratio, '.2f') + 'x' if ratio else '-'} |")
    mega, graphs = (tests[0][1][i][1] for i in (0, 1))
    if mega and graphs and mega.get("ms_per_token") and graphs.get("ms_per_token"):
        ratio = graphs["ms_per_token"] / mega["ms_per_token"]
        verdict = "met" if ratio >= COMPARE_TARGET else "NOT met"
        print(f"megakernel vs graphs+PDL, tg{a.ctx}: {ratio:.2f}x (target >= {COMPARE_TARGET}x: {verdict})")
    else:
        print(f"megakernel vs graphs+PDL, tg{a.ctx}: not measured (a runner failed or was skipped)")
    print("tg: mk's mean over positions 0..ctx-1 (tgN); torch: decode tokens after a ctx-token prefill."
          + (f" pp{a.pp}: mk's prompt in prefill chunks of its -b (results.md has the flags), torch's one forward;"
             f" ms per prompt = {a.pp} x ms/token." if a.pp else ""))
    return 0


# mk bench -o json's rows as mk writes them, and torch_baseline.py's lines, with round figures: the expected
# ms, ratios and GB/s below are worked by hand from them (e.g. pp512 at 100000 t/s: 0.01 ms/token, 5.12 ms).
SELF_TEST_MK = {
    "pp512 forward": ("--backend cuda -b 512", [{"backend": "cuda", "test": "pp512", "n_tokens": 512,
                                                   "tokens_per_s": 90000.0, "weight_gb_per_s": 216000.0}]),
    "tg128": ("--backend cuda", [{"backend": "cuda", "test": "tg128", "n_tokens": 128, "tokens_per_s": 1250.0,
                                  "weight_gb_per_s": 3000.0}]),
    "tg128 kernels": ("--backend cuda-kernels", [{"backend": "cuda-kernels+pdl", "test": "tg128", "n_tokens": 128,
                                                  "tokens_per_s": 800.0, "weight_gb_per_s": 1920.0}]),
    "tg128 graphs": ("--backend cuda-kernels --graph", [{"backend": "cuda-kernels-graph+pdl", "test": "tg128",
                                                         "n_tokens": 128, "tokens_per_s": 1000.0,
                                                         "weight_gb_per_s": 2400.0}]),
    "pp512": ("--backend cuda -b 512", [{"backend": "cuda", "test": "pp512", "n_tokens": 512, "tokens_per_s": 100000.0,
                                         "weight_gb_per_s": 240000.0}]),
    "pp512 kernels": ("--backend cuda-kernels -b 512", [{"backend": "cuda-kernels+pdl", "test": "pp512", "n_tokens": 512,
                                                         "tokens_per_s": 80000.0, "weight_gb_per_s": 192000.0}]),
    "pp512 graphs": ("--backend cuda-kernels --graph -b 512", None),  # mk bench failed: no JSON
}
SELF_TEST_OTHER = [
    {"source": "copy", "mode": "copy", "gb_per_s": 4000.0, "device": "canned"},
    {"source": "torch", "mode": "eager", "ctx": 128, "ms_per_token": 20.0, "tokens_per_s": 50.0,
     "weight_bytes": 2.4e9},
    {"source": "torch", "mode": "prefill", "test": "pp512", "ctx": 512, "ms": 25.6, "samples_ms": [25.5, 25.7],
     "ms_per_token": 0.05, "tokens_per_s": 20000.0, "weight_bytes": 2.4e9, "n_tokens": 512, "reps": 2},
]
SELF_TEST_EXPECT = {
    "compare": [
        "| tg128 | megakernel (mk --backend cuda) | 0.800 | 1250.0 | - | 1.00x |",
        "| tg128 | graphs+PDL (mk --backend cuda-kernels --graph) | 1.000 | 1000.0 | - | 1.25x |",
        "| tg128 | kernels+PDL (mk --backend cuda-kernels) | 1.250 | 800.0 | - | 1.56x |",
        "| tg128 | torch eager (bench/torch_baseline.py) | 20.000 | 50.0 | - | 25.00x |",
        # The bench stage's pp512 row (100000 t/s), not the forward stage's earlier one (90000).
        "| pp512 | megakernel (mk --backend cuda) | 0.0100 | 100000.0 | 5.12 | 1.00x |",
        "| pp512 | graphs+PDL (mk --backend cuda-kernels --graph) | not measured | - | - | - |",
        "| pp512 | kernels+PDL (mk --backend cuda-kernels) | 0.0125 | 80000.0 | 6.40 | 1.25x |",
        "| pp512 | torch eager prefill (bench/torch_baseline.py --modes prefill) | 0.0500 | 20000.0 | 25.60 | 5.00x |",
        "megakernel vs graphs+PDL, tg128: 1.25x (target >= 1.2x: met)",
    ],
    "summary": [
        "| mk --backend cuda | bf16 | 128 | 0.800 | 1250.0 | 3000 | 75.0 |",  # 2.4 GB a token in 0.8 ms, of 4000 GB/s
        "| mk --backend cuda -b 512 | bf16 | 512 | 0.0100 | 100000.0 | - | - |",
        "| mk --backend cuda-kernels --graph -b 512 | bf16 | - | error: mk bench failed",
        "| torch eager prefill | bf16 | 512 | 0.0500 | 20000.0 | - | - |",
    ],
    "results": [
        "| 512 | torch eager prefill | 0.0500 | 20000.0 | - | - | `python3 bench/torch_baseline.py --modes prefill --pp 512` |",
        "| 128 | torch eager | 20.000 | 50.0 | 120 | 3.0 | `python3 bench/torch_baseline.py --modes eager --ctx 128` |",
    ],
}


def self_test():
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        bench = os.path.join(tmp, "bench.jsonl")
        with open(bench, "w") as out:
            for name, (flags, rows) in SELF_TEST_MK.items():
                path = os.path.join(tmp, name.replace(" ", "_") + ".json")
                with open(path, "w") as f:
                    f.write(json.dumps(rows) if rows is not None else "")
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    wrap_mk(argparse.Namespace(file=path, dtype="bf16", flags=flags, ctx_map="pp512=512,tg128=128",
                                               command=""))
                out.write(buf.getvalue())
            for r in SELF_TEST_OTHER:
                out.write(json.dumps(r) + "\n")
        stages = os.path.join(tmp, "stages.tsv")
        with open(stages, "w") as f:
            f.write("bench\tok\t42\n")
        calls = {
            "compare": (compare, argparse.Namespace(bench=bench, dtype="bf16", ctx=128, pp=512, note="")),
            "summary": (summary, argparse.Namespace(bench=bench, stages=stages)),
            "results": (results, argparse.Namespace(bench=bench, header_only=False, date="d", commit="c", device="x",
                                                    model="m")),
        }
        for cmd, (fn, args) in calls.items():
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                fn(args)
            for phrase in SELF_TEST_EXPECT[cmd]:
                if phrase not in buf.getvalue():
                    failed += 1
                    print(f"self-test {cmd}: want '{phrase}' in:\n{buf.getvalue()}")
    n = sum(len(v) for v in SELF_TEST_EXPECT.values())
    print(f"{n - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wrap-mk")
    w.add_argument("file")
    w.add_argument("--dtype", required=True)
    w.add_argument("--flags", default="")
    w.add_argument("--ctx-map", default="")
    w.add_argument("--command", default="")
    s = sub.add_parser("summary")
    s.add_argument("bench")
    s.add_argument("stages")
    r = sub.add_parser("results")
    r.add_argument("bench", nargs="?", default="")
    r.add_argument("--header-only", action="store_true")
    for field in ("date", "commit", "device", "model"):
        r.add_argument("--" + field, default="?")
    c = sub.add_parser("compare")
    c.add_argument("bench")
    c.add_argument("--dtype", default="bf16")
    c.add_argument("--ctx", type=int, default=128)
    c.add_argument("--pp", type=int, default=512, help="the prompt test's length (ppN); 0: the tg rows only")
    c.add_argument("--note", default="", help="said in the table's heading (a rehearsal: not a measurement)")
    sub.add_parser("self-test")
    a = ap.parse_args()
    if a.cmd == "self-test":
        return self_test()
    return {"wrap-mk": wrap_mk, "summary": summary, "results": results, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

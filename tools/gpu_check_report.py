#!/usr/bin/env python3
"""tools/gpu-check.sh's bookkeeping: turns `mk bench -o json` output into JSON lines, and prints the
closing tables (stage results; ms/token, tokens/s and share of the measured copy bandwidth).

    gpu_check_report.py wrap-mk FILE --dtype D --flags "F" --ctx-map pp512=512,tg128=128 --command "mk bench ..."
    gpu_check_report.py summary BENCH_JSONL STAGES_TSV
    gpu_check_report.py results BENCH_JSONL --date D --commit C --device NAME --model SHAPE   (or --header-only)
    gpu_check_report.py compare BENCH_JSONL [--dtype bf16 --ctx 128]

`results` prints rows in bench/RESULTS.md's GPU table format, so recording a run is one paste.

BENCH_JSONL holds one JSON object per line: {"source": "copy", "gb_per_s"}, {"source": "mk", ...} and
{"source": "torch", "mode", "ctx", "ms_per_token", "weight_bytes"}. STAGES_TSV: stage, status, seconds.
"""
import argparse
import json
import sys


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


def rates(r, copy_gbs):
    """ms/token, weight GB/s and % of the copy bandwidth of one mk or torch record."""
    ms, wb = r.get("ms_per_token"), r.get("weight_bytes")
    gbs = wb / (ms * 1e-3) / 1e9 if ms and wb else None
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
        if src == "mk":
            backend = ("mk " + r.get("flags", "")).strip()
            weights, command = r.get("dtype", "?"), r.get("command") or backend
        else:
            backend, weights = f"torch {r.get('mode', '?')}", "bf16"
            command = f"python3 bench/torch_baseline.py --modes {r.get('mode', '?')} --ctx {r.get('ctx', '?')}"
        ms, gbs, pct = rates(r, copy_gbs)
        print(f"| {a.date} | {a.commit} | {a.device} | {a.model} | {weights} | {r.get('ctx', '-')} | {backend} | "
              f"{fmt_num(ms, '.3f')} | {fmt_num(r.get('tokens_per_s'), '.1f')} | {fmt_num(gbs, '.0f')} | "
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
        if src == "mk":
            name = ("mk " + r.get("flags", "")).strip()
            dtype = r.get("dtype", "?")
        else:
            name, dtype = f"torch {r.get('mode', '?')}", "bf16"
        if r.get("error"):
            print(f"| {name} | {dtype} | {r.get('ctx', '-')} | error: {r['error'][:60]} | | | |")
            continue
        ms, gbs, pct = rates(r, copy_gbs)
        print(f"| {name} | {dtype} | {r.get('ctx', '-')} | {fmt_num(ms, '.3f')} | "
              f"{fmt_num(r.get('tokens_per_s'), '.1f')} | {fmt_num(gbs, '.0f')} | {fmt_num(pct, '.1f')} |")
    print()
    print("mk: mean over positions 0..ctx-1 (mk bench ppN/tgN); torch: decode tokens after a ctx-token prefill.")
    return 0


# The baselines the megakernel is held against (issue 20: >= 1.2x graphs+PDL), by mk's backend names.
COMPARE_RUNNERS = (
    ("megakernel (mk --backend cuda)", lambda r: r.get("source") == "mk" and r.get("backend") == "cuda"),
    ("graphs+PDL (mk --backend cuda-kernels --graph)",
     lambda r: r.get("source") == "mk" and r.get("backend") == "cuda-kernels-graph+pdl"),
    ("kernels+PDL (mk --backend cuda-kernels)", lambda r: r.get("source") == "mk" and r.get("backend") == "cuda-kernels+pdl"),
    ("torch eager (bench/torch_baseline.py)", lambda r: r.get("source") == "torch" and r.get("mode") == "eager"),
)
COMPARE_TARGET = 1.2


def compare(a):
    """One table: each runner's ms/token at one dtype and context, and the megakernel's speed-up over it."""
    records, _ = read_records(a.bench)
    rows = []
    for name, match in COMPARE_RUNNERS:
        found = [r for r in records if match(r) and not r.get("error") and r.get("ctx") == a.ctx and
                 (r.get("source") == "torch" or r.get("dtype") == a.dtype)]
        rows.append((name, found[0].get("ms_per_token") if found else None))
    mega = rows[0][1]
    print(f"baseline comparison, {a.dtype} tg at ctx {a.ctx} (one run, same shape){': ' + a.note if a.note else ''}:")
    print("| runner | ms/token | megakernel speed-up |")
    print("| --- | ---: | ---: |")
    for name, ms in rows:
        ratio = ms / mega if ms and mega else None
        print(f"| {name} | {fmt_num(ms, '.3f') if ms else 'not measured'} | "
              f"{fmt_num(ratio, '.2f') + 'x' if ratio else '-'} |")
    graphs = rows[1][1]
    if mega and graphs:
        ratio = graphs / mega
        verdict = "met" if ratio >= COMPARE_TARGET else "NOT met"
        print(f"megakernel vs graphs+PDL: {ratio:.2f}x (target >= {COMPARE_TARGET}x: {verdict})")
    else:
        print("megakernel vs graphs+PDL: not measured (a runner failed or was skipped)")
    print("mk: mean over positions 0..ctx-1 (tgN); torch: decode tokens after a ctx-token prefill.")
    return 0


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
    c.add_argument("--note", default="", help="said in the table's heading (a rehearsal: not a measurement)")
    a = ap.parse_args()
    return {"wrap-mk": wrap_mk, "summary": summary, "results": results, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

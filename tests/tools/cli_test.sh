#!/usr/bin/env bash
# The mk CLI at its boundary: bad input gives one clear error line and a non-zero exit, never a crash;
# `mk bench -o json` is valid JSON with tokens/s for pp and tg; a full context is reported; --backend cuda-emu
# prints the cpu backend's text. Usage: cli_test.sh MK CASE
# (exit 77: skipped, the default model is not fetched).
set -uo pipefail
mk=$1
case_name=$2
model=${MK_CACHE:-$HOME/.cache/mk}/SmolLM2-135M-Instruct.Q4_1.gguf
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

fail() { echo "cli_test $case_name: $*"; echo "-- stdout:"; cat "$out"; echo "-- stderr:"; cat "$err"; exit 1; }
need_model() { [[ -f $model ]] || { echo "skipped: $model is missing (tools/setup.sh)"; exit 77; }; }
# Runs mk, expects exit code $1 and exactly one stderr line matching $2.
expect_error() {
  local want_rc=$1 pattern=$2
  shift 2
  "$mk" "$@" >"$out" 2>"$err"
  local rc=$?
  [[ $rc == "$want_rc" ]] || fail "exit code $rc, want $want_rc"
  [[ $(wc -l <"$err") == 1 ]] || fail "want exactly one line on stderr"
  grep -Eq "$pattern" "$err" || fail "stderr does not match /$pattern/"
  echo "ok: $(cat "$err")"
}

case $case_name in
  bad_flag)
    # CLI11's option errors in mk's form: one line, exit 2.
    expect_error 2 '^mk: error: .*--no-such-flag' generate --no-such-flag -p hi
    expect_error 2 '^mk: error: .*--prompt' generate
    expect_error 2 '^mk: error: .*--temp' generate -p hi --temp fast
    expect_error 2 '^mk: error: .*--sms and --smem go together' generate -p hi --sms 4
    ;;
  missing_model)
    expect_error 2 '^mk: error: /nonexistent/model\.gguf: no such model file' generate -m /nonexistent/model.gguf -p hi
    ;;
  long_prompt)
    need_model
    expect_error 2 '^mk: error: the prompt has [0-9]+ tokens but the context holds 8' \
      generate -m "$model" -c 8 -n 4 -p "The capital of France is a city with a very long history indeed"
    [[ ! -s $out ]] || fail "printed text before failing"
    ;;
  bench_json)
    need_model
    "$mk" bench -m "$model" -p 8 -n 4 -r 2 -o json >"$out" 2>"$err" || fail "mk bench failed"
    python3 - "$out" <<'PY' || fail "bad JSON"
import json, sys
rows = json.load(open(sys.argv[1]))
tests = {r["test"]: r for r in rows}
assert set(tests) == {"pp8", "tg4"}, tests.keys()
for r in rows:
    assert r["tokens_per_s"] > 0 and len(r["samples"]) == 2, r
print("ok:", ", ".join(f'{r["test"]} {r["tokens_per_s"]:.1f} t/s' for r in rows))
PY
    ;;
  info_tp)
    # mk info lists the --tp sizes a model splits into: SmolLM2 has 3 KV heads, the Llama-3.2-1B shape 8.
    need_model
    "$mk" info --json >"$out" 2>"$err" || fail "mk info failed"
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["tp_sizes"]; assert s == [1, 3], s' "$out" ||
      fail "SmolLM2's tp_sizes are not [1, 3]"
    "$mk" info synthetic:llama-3.2-1b:q4_1:layers=1 >"$out" 2>"$err" || fail "mk info of a synthetic spec failed"
    grep -Eq '^tp_sizes +1, 2, 4, 8 ' "$out" || fail "the Llama-3.2-1B shape's tp_sizes are not 1, 2, 4, 8"
    echo "ok: $(grep '^tp_sizes' "$out")"
    ;;
  nccl_probe)
    # mk devices names the NCCL it would load for tensor parallelism across GPUs, or why it cannot.
    "$mk" devices >"$out" 2>"$err" || fail "mk devices failed"
    if grep -q '^cuda: not built' "$out"; then echo "skipped: built without CUDA"; exit 77; fi
    grep -Eq '^nccl: ' "$out" || fail "no nccl line"
    MK_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$mk" devices >"$out" 2>"$err" || fail "mk devices failed"
    grep -Eq '^nccl: not usable \(--tp on separate GPUs uses CUDA peer access\): (/nonexistent/libnccl\.so\.2: cannot load|this mk was built without NCCL headers)' "$out" ||
      fail "a missing library is not named"
    echo "ok: $(grep '^nccl' "$out")"
    ;;
  context_full)
    # A generation that runs out of context says so in one line (and still exits 0).
    need_model
    "$mk" generate -m "$model" -c 12 -n 64 --ignore-eos -p "The capital of France is" >"$out" 2>"$err" ||
      fail "mk generate failed"
    grep -Eq '^mk: the context of 12 tokens is full: generation stopped' "$err" || fail "no context-full line"
    echo "ok: $(grep 'context of' "$err")"
    ;;
  cuda_emu)
    # The megakernel's device code on the CUDA emulator prints the CPU backend's greedy text; its
    # slowness notice goes to stderr, the text alone to stdout.
    spec=synthetic:tiny-llama:bf16
    "$mk" generate --backend cpu --cpu-dots exact -m $spec -p "Hello" -n 16 --temp 0 >"$out" 2>"$err" || fail "cpu failed"
    want=$(cat "$out")
    "$mk" generate --backend cuda-emu -m $spec -p "Hello" -n 16 --temp 0 >"$out" 2>"$err" || fail "cuda-emu failed"
    grep -q 'runs the CUDA device code in the emulator' "$err" || fail "no slowness notice on stderr"
    grep -Eq '^mk: backend cuda-emu \([0-9]+ SMs\)$' "$err" || fail "the summary does not name the emulated backend"
    [[ $(cat "$out") == "$want" ]] || fail "cuda-emu's text differs from the cpu backend's: '$want'"
    echo "ok: cuda-emu = cpu: $want"
    ;;
  calibration)
    # mk devices --calibrate on the emulator writes an "emulated" file; mk inspect --calibration applies it with a
    # warning and refuses a malformed one naming the file and the key.
    dir=$(mktemp -d)
    "$mk" devices --calibrate "$dir/cal.json" --backend cuda-emu >"$out" 2>"$err" || fail "mk devices --calibrate failed"
    grep -q '"emulated": true' "$dir/cal.json" || fail "the emulated calibration does not say so"
    # The h200 target without --backend cuda: an mk built without CUDA (the sanitizer builds) compiles it too.
    "$mk" schedule -m synthetic:tiny-llama:f32 --target h200 -o "$dir/s.mks" >"$out" 2>"$err" \
      || fail "mk schedule failed"
    "$mk" inspect "$dir/s.mks" --calibration "$dir/cal.json" >"$out" 2>"$err" || fail "mk inspect --calibration failed"
    grep -q 'measured on the CUDA emulator' "$out" || fail "no warning for an emulated calibration"
    grep -q '^cost model: device (h200 (calibrated on' "$out" || fail "the prediction is not the calibrated one"
    # A prefill step's prediction is a step of T tokens, not a time a token.
    "$mk" schedule -m synthetic:tiny-llama:f32 --target h200 --prefill 16 -o "$dir/p.mks" >"$out" 2>"$err" \
      || fail "mk schedule --prefill failed"
    grep -Eq '= [0-9.]+ ms a 16-token step \([0-9]+ tokens/s\)' "$out" || fail "no prefill step summary: $(cat "$out")"
    echo '{"mk_calibration": 1, "device": "d", "sms": 2, "emulated": false, "constants": {"fence_nanos": {"value": 1}}}' \
      >"$dir/bad.json"
    expect_error 2 "^mk: error: $dir/bad.json: constants.fence_nanos: unknown key" inspect "$dir/s.mks" \
      --calibration "$dir/bad.json"
    rm -rf "$dir"
    ;;
  *)
    echo "cli_test: unknown case $case_name" >&2
    exit 2
    ;;
esac

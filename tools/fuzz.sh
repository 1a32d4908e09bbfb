#!/usr/bin/env bash
# Fuzzes every parser of untrusted bytes: builds the libFuzzer targets of tests/fuzz with clang (build/fuzz),
# makes a seed corpus from real files, runs each target for SECONDS and exits non-zero on any finding.
# Usage: [MK_EXE=path/to/mk] tools/fuzz.sh [SECONDS=60] [TARGET...]
# Findings: build/fuzz/findings/<target>-{crash,leak,timeout,oom}-*; the run log of each target beside them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${MK_FUZZ_BUILD:-$root/build/fuzz}
cache=${MK_CACHE:-$HOME/.cache/mk}
data=${MK_TEST_DATA:-$cache/test-data/llama-cpp-python-0.3.36}  # tools/setup.sh --test
jobs=${MK_JOBS:-2}
if [ ! -f "$data/ggml-vocab-starcoder.gguf" ]; then
  echo "fuzz: error: $data: the real test data is missing; run ./tools/setup.sh --test" >&2
  exit 2
fi
all_targets=(fuzz_gguf fuzz_safetensors fuzz_hf_config fuzz_schedule fuzz_tokenizer fuzz_chat_template)
targets=("${@:-${all_targets[@]}}")

# -max_len per target: big enough for a real header or file, small enough to keep executions fast.
declare -A max_len=([fuzz_gguf]=65536 [fuzz_safetensors]=65536 [fuzz_hf_config]=8192 [fuzz_schedule]=16384
                    [fuzz_tokenizer]=4096 [fuzz_chat_template]=16384)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "== fuzz: build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DMK_FUZZ=ON -DMK_CUDA=OFF -DMK_BUILD_TESTS=OFF -DMK_BUILD_BENCH=OFF \
  -DMK_TEST_DATA="$data" "${launcher[@]}" >/dev/null
# The seeds need an mk that can write synthetic models and schedules: MK_EXE, or this folder's own.
mk=${MK_EXE:-$build/tools/mk}
cmake --build "$build" -j "$jobs" --target "${all_targets[@]}" $([ -n "${MK_EXE:-}" ] || echo mk)

# Seeds are made here at run time from real files (nothing binary is committed); the live corpus that
# libFuzzer grows is kept beside them, so later runs start from what earlier runs found.
echo "== fuzz: seed corpus"
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds" "$build/findings"
for t in "${all_targets[@]}"; do mkdir -p "$seeds/$t" "$build/corpus/$t"; done
export ASAN_OPTIONS=detect_leaks=0  # the seed makers are not under test here
tmp=$seeds/tmp
mkdir -p "$tmp"
"$mk" synth synthetic:tiny-llama:q4_1 -o "$tmp/tiny-llama-q4_1.gguf" >/dev/null
"$mk" synth synthetic:tiny-qwen3:q8_0 -o "$tmp/tiny-qwen3-q8_0.gguf" >/dev/null
"$mk" synth synthetic:tiny-llama:bf16:format=safetensors -o "$tmp/llama-st" >/dev/null
"$mk" synth synthetic:tiny-qwen2:bf16:format=safetensors -o "$tmp/qwen2-st" >/dev/null
"$mk" synth synthetic:tiny-qwen3:bf16:format=safetensors -o "$tmp/qwen3-st" >/dev/null
"$mk" schedule -m synthetic:tiny-llama:f32 --sms 4 --smem 232448 -o "$seeds/fuzz_schedule/tiny-llama-4sm.mks" >/dev/null
"$mk" schedule -m synthetic:tiny-llama:f32 --sms 2 --smem 232448 --policy round-robin \
  -o "$seeds/fuzz_schedule/tiny-llama-2sm-rr.mks" >/dev/null
for f in "$tmp"/*.gguf; do head -c 65536 "$f" >"$seeds/fuzz_gguf/$(basename "$f")"; done
for f in "$data"/ggml-vocab-*.gguf "$cache/SmolLM2-135M-Instruct.Q4_1.gguf"; do
  [ -f "$f" ] && head -c 65536 "$f" >"$seeds/fuzz_gguf/$(basename "$f").head"
done
for d in "$tmp"/*-st; do
  n=$(basename "$d")
  head -c 65536 "$d/model.safetensors" >"$seeds/fuzz_safetensors/$n.safetensors"
  cp "$d/config.json" "$seeds/fuzz_hf_config/$n-config.json"
done
# Tokenizer inputs: byte 0 picks parse_special, then the real vocabularies' test strings, one a seed.
python3 - "$data" "$seeds/fuzz_tokenizer" <<'EOF'
import pathlib, sys
data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
n = 0
for inp in sorted(data.glob("ggml-vocab-*.inp")):
    for text in inp.read_bytes().split(b"\n__ggml_vocab_test__\n"):
        for special in (b"\0", b"\1"):
            (out / f"s{n:04d}").write_bytes(special + text)
            n += 1
(out / "special").write_bytes(b"\1<|endoftext|>Hello<fim_prefix> world<|im_start|>")
EOF
# Chat inputs: a real template, then NUL-separated message contents.
for f in "$data"/templates/*.jinja; do
  { cat "$f"; printf '\0You are terse.\0Hello <think>plan</think> there\0Hi!\0Bye {{ x }}'; } \
    >"$seeds/fuzz_chat_template/$(basename "$f")"
done
printf '<|im_start|>{{ message.content }}\0sys\0user' >"$seeds/fuzz_chat_template/chatml-min"
rm -rf "$tmp"
unset ASAN_OPTIONS

echo "== fuzz: ${seconds}s per target"
status=0
summary=()
for t in "${targets[@]}"; do
  log=$build/findings/$t.log
  before=$(ls "$build/findings" | grep -cE "^$t-(crash|leak|timeout|oom)-" || true)
  rc=0
  UBSAN_OPTIONS=print_stacktrace=1 "$build/tests/fuzz/$t" "$build/corpus/$t" "$seeds/$t" \
    -max_total_time="$seconds" -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$build/findings/$t-" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  after=$(ls "$build/findings" | grep -cE "^$t-(crash|leak|timeout|oom)-" || true)
  found=$(ls -t "$build/findings" | grep -E "^$t-(crash|leak|timeout|oom)-" | head -1 || true)
  result=ok
  if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
    result="FINDING rc=$rc ${found:+$build/findings/$found} (log $log)"
    status=1
    grep -E "ERROR: |SUMMARY: |runtime error:" "$log" | head -5 >&2 || true
  fi
  line=$(printf '%-20s %10s execs %8s/s  corpus %5s  %s' "$t" "${execs:-?}" "${rate:-?}" \
    "$(ls "$build/corpus/$t" | wc -l)" "$result")
  echo "$line"
  summary+=("$line")
done
echo "== fuzz: summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit $status

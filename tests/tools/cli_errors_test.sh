#!/usr/bin/env bash
# The mk CLI refuses bad input with exit code 2 and one line "mk: error: <file>: <what is wrong>": corrupt or
# other-version .mks files, a context that cannot fit (MK_MEMORY_LIMIT), over-long prompts, bad models and flags,
# tensor-parallel sizes that do not fit.
# Usage: cli_errors_test.sh MK_EXE WORK_DIR
set -uo pipefail
mk=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
fails=0

# expect CODE REGEX COMMAND...: the command exits with CODE ("nonzero": any but 0) and its stderr matches REGEX.
expect() {
  local code=$1 pattern=$2 out rc
  shift 2
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if { [ "$code" = nonzero ] && [ "$rc" -eq 0 ]; } || { [ "$code" != nonzero ] && [ "$rc" -ne "$code" ]; } ||
     ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc, stderr: $out (wanted exit $code, /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok: $* -> exit $rc: $(head -1 <<<"$out")"
  fi
}

# set_byte FILE OFFSET: writes a byte different from the one there.
set_byte() {
  local old
  old=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\$(printf '%03o' $(((old + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

"$mk" synth synthetic:tiny-llama:f32 -o "$dir/m.gguf" >/dev/null || exit 1
"$mk" schedule -m "$dir/m.gguf" --sms 4 --smem 232448 -o "$dir/good.mks" >/dev/null || exit 1
run=(generate -m "$dir/m.gguf" -p "Hello" -n 2 --temp 0 -t 1)

expect 0 '' "$mk" "${run[@]}" --schedule "$dir/good.mks"
cp "$dir/good.mks" "$dir/flip.mks"
set_byte "$dir/flip.mks" 100
expect 2 '^mk: error: .*flip\.mks: checksum mismatch \(stored [0-9a-f]{16}, computed [0-9a-f]{16}\): the file is corrupt or truncated$' \
  "$mk" "${run[@]}" --schedule "$dir/flip.mks"
cp "$dir/good.mks" "$dir/old.mks"
set_byte "$dir/old.mks" 8  # the u32 version after the 8-byte magic
expect 2 '^mk: error: .*old\.mks: schedule version [0-9]+, this build reads version [0-9]+; compile the schedule again$' \
  "$mk" "${run[@]}" --schedule "$dir/old.mks"
head -c 300 "$dir/good.mks" >"$dir/cut.mks"
expect 2 '^mk: error: .*cut\.mks: checksum mismatch' "$mk" "${run[@]}" --schedule "$dir/cut.mks"

expect 2 '^mk: error: .*m\.gguf: context 16 needs [0-9]+ bytes of KV cache \([0-9]+ with the [0-9]+-byte arena and [0-9]+ bytes of weights\), but only 1024 bytes are available \(MK_MEMORY_LIMIT\); use a smaller context \(-c\)$' \
  env MK_MEMORY_LIMIT=1K "$mk" "${run[@]}" -c 16
expect 2 '^mk: error: MK_MEMORY_LIMIT=lots: expected a byte count' env MK_MEMORY_LIMIT=lots "$mk" "${run[@]}"
expect 0 '' env MK_MEMORY_LIMIT=4G "$mk" "${run[@]}" -c 16
expect 2 '^mk: error: .*the prompt has [0-9]+ tokens but the context holds 4; shorten it or raise -c$' \
  "$mk" generate -m "$dir/m.gguf" -p "one two three four five six seven eight" -n 1 -c 4 -t 1

head -c 1000 "$dir/m.gguf" >"$dir/cut.gguf"
expect 2 '^mk: error: .*cut\.gguf: ' "$mk" info "$dir/cut.gguf"
printf 'GGUX\3\0\0\0' >"$dir/magic.gguf"
expect 2 "^mk: error: .*magic\\.gguf: not a GGUF file: it starts with bytes 47 47 55 58, not 'GGUF'$" "$mk" info "$dir/magic.gguf"
expect 2 '^mk: error: .*does-not-exist\.gguf' "$mk" info "$dir/does-not-exist.gguf"
expect nonzero "argument was not expected: --no-such-flag$" "$mk" generate -p hi --no-such-flag
expect nonzero 'temp' "$mk" generate -m "$dir/m.gguf" -p hi --temp warm
# The CUDA backends on a machine without a usable GPU (or an mk built without CUDA): a clear refusal.
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect 2 'no usable CUDA device|built without CUDA' "$mk" "${run[@]}" --backend cuda
  expect 2 'no usable CUDA device|built without CUDA' "$mk" "${run[@]}" --backend cuda-kernels --graph
  expect 2 'no usable CUDA device|built without CUDA' "$mk" "${run[@]}" --backend cuda --tp 2
fi
expect 2 'are for the CUDA backends' "$mk" "${run[@]}" --backend cpu --stepwise
# A prefill schedule for the CUDA backends with a longer chunk than each SM's scratch holds (cuda-emu: every build
# has it; its schedules are cuda's).
expect 2 '^mk: error: --prefill 4096: the CUDA backends run chunks of at most [0-9]+ tokens of this model .*; compile --prefill [0-9]+ or less$' \
  "$mk" schedule -m "$dir/m.gguf" --backend cuda-emu --target h200 --prefill 4096 -o "$dir/long.mks"

# Tensor parallel: sizes the model cannot split, loopback without a GPU backend, a schedule of another size.
expect 0 '' "$mk" "${run[@]}" --tp 2
expect 2 "^mk: error: --tp 3: the model's 2 KV heads do not split 3 ways \\(the TP size must divide the KV heads\\)$" \
  "$mk" "${run[@]}" --tp 3
expect 2 '^mk: error: --tp-loopback 2 shares one GPU between the ranks: it needs --backend cuda or cuda-kernels' \
  "$mk" "${run[@]}" --backend cpu --tp-loopback 2
expect 2 '^mk: error: .*good\.mks: compiled for 1 tensor-parallel rank\(s\), not the --tp 2 asked for$' \
  "$mk" "${run[@]}" --schedule "$dir/good.mks" --tp 2
expect nonzero 'tp' "$mk" "${run[@]}" --tp 0

echo "$fails failure(s)"
[ "$fails" -eq 0 ]

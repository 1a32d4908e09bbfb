#!/usr/bin/env bash
# tools.gpu_check_dry_run: `tools/gpu-check.sh --dry-run --bin BUILD` passes its checks and prints what a
# GPU run needs decided in advance: every stage's commands (compute-sanitizer's three tools among them, and
# the bench stage's pp512 rows: the megakernel, kernels, graphs and torch eager prefill), the early-stop rule,
# the limits table with its sum within 7 min 15 s, the calibrate stage's re-priced decode and prefill predictions,
# and where results.md goes with the results table's header.
#   gpu_check_dry_run_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash "$src/tools/gpu-check.sh" --dry-run --bin "$build" >"$log" 2>&1
rc=$?
cat "$log"
fail=0
expect() {  # PATTERN WHAT
  grep -qE -- "$1" "$log" || { echo "gpu_check_dry_run_test: missing $2 (/$1/)"; fail=1; }
}
((rc == 0)) || { echo "gpu_check_dry_run_test: the dry run exited $rc"; fail=1; }
for tool in memcheck synccheck racecheck; do
  expect "would run .*compute-sanitizer --tool $tool .*\[cuda\]\[sanitize\]" "the $tool command line"
done
# pp512 on the megakernel runs twice, in forward and in bench; on the kernel-per-op backends in bench only.
for flags in "cuda" "cuda-kernels" "cuda-kernels --graph"; do
  n=$(grep -cE -- "would run .*mk bench -m synthetic:llama-3\.2-1b:bf16 -p 512 -n 0 -r 1 -o json --backend $flags -b 512\$" "$log")
  want=1
  [[ $flags == cuda ]] && want=2
  ((n == want)) || { echo "gpu_check_dry_run_test: $n pp512 rows on --backend $flags, want $want"; fail=1; }
done
# The calibrate stage re-prices issue 21's 512-token prefill chunk as well as the decode step.
expect "would run .*mk schedule -m synthetic:llama-3\.2-1b:bf16 --target h200 --backend cuda --prefill 512 " \
  "the calibrate stage's prefill schedule"
expect "would run .*mk inspect .*calibrate-prefill\.mks --calibration " "the calibrate stage's re-priced prefill"
expect "would run .*torch_baseline\.py --modes eager,prefill .*--pp 512" "the torch eager prefill row"
expect '^on failure: stop \(smoke\) / skip bench \(correctness stages\)$' "the early-stop line"
for stage in rebuild smoke calibrate sanitize ops forward resident tp bench compiled; do
  expect "^  $stage +[0-9]+  " "the limits table's $stage row"
done
sum=$(sed -nE 's/^  sum +([0-9]+) .*/\1/p' "$log")
# 7 minutes, and 15 s for the calibrate stage (issue 20).
[[ -n $sum ]] && ((sum + 20 <= 435)) || { echo "gpu_check_dry_run_test: the limits' sum '$sum' s (+20 s margin) is over 7 min 15 s"; fail=1; }
grep -A1 -E '^results: .*/results\.md$' "$log" | grep -qF '| date | commit | device | model | weights | ctx | backend |' \
  || { echo "gpu_check_dry_run_test: 'results: <out>/results.md' is not followed by the results header"; fail=1; }
exit $fail

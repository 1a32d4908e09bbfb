#!/usr/bin/env bash
# The tensor-parallel exchange alternatives of docs/distributed.md, on the simulator (--target h200, bf16).
# Needs an mk built from a scratch copy with bench/tp_variants.patch applied (environment knobs, never
# merged): MK_TP_CHUNKS (transfer chunks per projection), MK_TP_REDUCE_SPLIT (reduce_add pieces per chunk),
# MK_TP_EXCHANGE=rsag|orep (reduce-scatter + all-gather; replicated O-projection), MK_TP_NO_LOGITS (argmaxes
# only), MK_PAGE_BYTES (64 KiB pages, so rows wider than 16 KiB compile), MK_NO_VERIFY, MK_NO_SAVE; its
# `mk schedule` prints one TPSIM line. Usage: bench/tp_variants.sh PATCHED_MK > log
set -euo pipefail
mk=$1
export MK_NO_VERIFY=1 MK_NO_SAVE=1 MK_PAGE_BYTES=65536
run() {  # label model tp [VAR=value...]
  local label=$1 model=$2 tp=$3
  shift 3
  echo "$label model=$model $(env "$@" "$mk" schedule -m "synthetic:$model:bf16" --target h200 --tp "$tp" -o /dev/null | grep TPSIM)"
}
for c in llama-3.2-1b:1 llama-3.2-1b:2 llama-3.2-1b:4 llama-3.1-8b:1 llama-3.1-8b:2 llama-3.1-8b:4 llama-3.1-8b:8 \
         llama-3.1-70b:1 llama-3.1-70b:2 llama-3.1-70b:4 llama-3.1-70b:8; do
  m=${c%:*} tp=${c#*:}
  run base "$m" "$tp"
  [[ $tp == 1 ]] && continue
  for ch in 1 2 8 16; do run "chunks$ch" "$m" "$tp" MK_TP_CHUNKS=$ch; done
  run split8 "$m" "$tp" MK_TP_REDUCE_SPLIT=8
  run rsag "$m" "$tp" MK_TP_EXCHANGE=rsag MK_TP_CHUNKS="$tp"
  run rsag2 "$m" "$tp" MK_TP_EXCHANGE=rsag MK_TP_CHUNKS=$((2 * tp))
  run orep "$m" "$tp" MK_TP_EXCHANGE=orep
  run nologits "$m" "$tp" MK_TP_NO_LOGITS=1
done

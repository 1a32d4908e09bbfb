#!/usr/bin/env bash
# The GPU checks in one call on a lent H200, smallest first: smoke, calibrate (the cost model's constants),
# sanitize, ops, forward, resident (+ the HF check), tp (tensor parallel on SM partitions: --tp-loopback), bench,
# compiled. Each stage runs under its limit in the table below, which with the rebuild's row and the margin fits
# 7 min 15 s (7 min before the calibrate row).
# A failed smoke stops the run; a failed correctness stage skips the benchmarks. Logs, the closing
# tables and results.md (rows for bench/RESULTS.md) go to $OUT (./gpu-check-out when unset).
# Exit 1 when a stage failed. See README "GPU check".
#
#   tools/gpu-check.sh [--only STAGE[,STAGE]]... [--stop-on-failure] [--build|--no-build] [--bin DIR]
#   tools/gpu-check.sh --dry-run [--bin DIR]   everything but GPU launches (CI runs this)
#   tools/gpu-check.sh --rehearse [--bin DIR]  every stage against the CUDA emulator (mk and mk_cuda_emu_tests
#                                              of build/test; cuda-emu backends, small shapes, few tokens, limits x8)
#   tools/gpu-check.sh --pack                  fill build/gpu-carry/ from a local Release CUDA build
set -uo pipefail

# ---- the limits table: each stage's limit in seconds, in run order; every later stage adds its row here.
# `rebuild` runs first, and only when the carried binaries do not run on the GPU machine (an older glibc,
# a missing library): a Release build of mk and mk_cuda_tests there, estimated for 16 cores. Its critical
# path is nvcc on interpreter.cu (2 min 44 s wall, ptxas 72 s of it, on the 2-core dev VM at a load of ~15,
# 2026-12-03); the other ~90 sources spread over 16 cores. The rows plus the margin must stay within the
# budget (checked below).
limits_table="\
rebuild   90  Release build of mk and mk_cuda_tests there, only when the carried binaries do not run
smoke     25  nvidia-smi, mk devices, [cuda][smoke]
calibrate 15  micro-kernels measure the device cost model's constants; the Llama-3.2-1B predictions (decode step, 512-token prefill) re-priced
sanitize  45  compute-sanitizer memcheck, synccheck and racecheck on [cuda][sanitize] (stepwise, tiny)
ops       30  [cuda][ops]
forward   60  [cuda][forward], [cuda][prefill] (chunks against the CPU), pp512 (BF16 bench model, the resident kernel, one 512-token prefill chunk: -b 512)
resident  40  [cuda][resident], the HF transformers check, each CLI mode
tp        30  [cuda][tp], mk generate --backend cuda --tp-loopback 3 against --backend cpu
bench     65  copy bandwidth; BF16 tg128 (megakernel -r 3, graphs+PDL and kernels+PDL -r 1, torch eager) and pp512 (one chunk on the same three, torch eager prefill), one comparison table; Q8_0, Q4_1 as time allows
compiled  15  torch.compile baseline: last, and only when the run still has this slot
"
budget_s=435 margin_s=20
early_stop="on failure: stop (smoke) / skip bench (correctness stages)"
correctness_stages=" ops forward resident tp "

root=$(cd "$(dirname "$0")/.." && pwd)
self="$root/tools/gpu-check.sh"
carry="$root/build/gpu-carry"
gpu_build="$root/build/gpu"
# The benchmark model: synthetic:SHAPE:DTYPE$KEYS (MK_GPU_BENCH_KEYS=":layers=2" for a quick try).
bench_shape=${MK_GPU_BENCH_SHAPE:-llama-3.2-1b} bench_keys=${MK_GPU_BENCH_KEYS:-}
declare -A stage_limit_s=() stage_about=()
all_stages=()
limits_sum=0
while read -r name limit about; do
  [[ -n $name ]] || continue
  stage_limit_s[$name]=$limit
  stage_about[$name]=$about
  [[ $name == rebuild ]] || all_stages+=("$name")
  limits_sum=$((limits_sum + limit))
done <<<"$limits_table"
if ((limits_sum + margin_s > budget_s)); then
  echo "gpu-check: the limits table adds up to ${limits_sum} s; with the ${margin_s} s margin that is over the" \
    "${budget_s} s budget: shorten a stage" >&2
  exit 2
fi
jobs=${MK_JOBS:-$(nproc)}

print_limits() {
  echo "limits (s):"
  while read -r name limit about; do
    [[ -n $name ]] && printf '  %-9s %4s  %s\n' "$name" "$limit" "$about"
  done <<<"$limits_table"
  printf '  %-9s %4s  (%d:%02d of the %d:%02d budget, with a %s s margin)\n' sum "$limits_sum" \
    $(((limits_sum + margin_s) / 60)) $(((limits_sum + margin_s) % 60)) $((budget_s / 60)) $((budget_s % 60)) "$margin_s"
}

usage() {
  sed -n '2,13p' "$self" | sed 's/^# \{0,1\}//'
  echo "stages: ${all_stages[*]}"
  print_limits
}

args=("$@")
only=() dry_run=0 rehearse=0 build=0 no_build=0 pack=0 stop_on_failure=0 bin_dir=""
while (($#)); do
  case $1 in
    --only) [[ $# -ge 2 ]] || { echo "gpu-check: --only needs a stage" >&2; exit 2; }
      IFS=, read -ra parts <<<"$2"; only+=("${parts[@]}"); shift 2 ;;
    --only=*) IFS=, read -ra parts <<<"${1#--only=}"; only+=("${parts[@]}"); shift ;;
    --dry-run) dry_run=1; shift ;;
    --rehearse) rehearse=1; shift ;;
    --build) build=1; shift ;;
    --no-build) no_build=1; shift ;;
    --pack) pack=1; shift ;;
    --stop-on-failure) stop_on_failure=1; shift ;;
    --bin) [[ $# -ge 2 ]] || { echo "gpu-check: --bin needs a folder" >&2; exit 2; }
      bin_dir=$(cd "$2" 2>/dev/null && pwd) || { echo "gpu-check: --bin $2: no such folder" >&2; exit 2; }; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
for s in "${only[@]}"; do
  [[ -n ${stage_limit_s[$s]:-} ]] || { echo "gpu-check: unknown stage '$s' (stages: ${all_stages[*]})" >&2; exit 2; }
done

# ---- --rehearse: the same stages and steps against the CUDA emulator, so the script is tested before a GPU is
# lent: the emulated backends, the emulated [cuda] suite, small shapes and few tokens, every limit x8 (the
# emulator runs each device thread as a fiber on the CPU). Tools only a GPU machine has are skipped, named.
cuda=cuda cuda_kernels=cuda-kernels tests_name=mk_cuda_tests limit_scale=1
if ((rehearse)); then
  ((dry_run || pack)) && { echo "gpu-check: --rehearse runs the stages; it does not combine with --dry-run or --pack" >&2; exit 2; }
  cuda=cuda-emu cuda_kernels=cuda-kernels-emu tests_name=mk_cuda_emu_tests limit_scale=8 no_build=1
  [[ -n $bin_dir ]] || bin_dir=$root/build/test
  bench_shape=${MK_GPU_BENCH_SHAPE:-smollm2-135m} bench_keys=${MK_GPU_BENCH_KEYS:-:layers=1:vocab=1024}
fi

# ---- --pack: Release CUDA build -> stripped mk, mk_cuda_tests and the header-only deps in build/gpu-carry ----
pack_deps() {
  # The GPU machine has none of our Debian packages; --build there finds these under deps/usr.
  local pkg f n=0
  for pkg in libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev catch2 libpcre2-dev; do
    dpkg -L "$pkg" >/dev/null 2>&1 || { echo "gpu-check: --pack: package $pkg is not installed (tools/setup.sh)" >&2; return 1; }
    while IFS= read -r f; do
      case $f in /usr/share/doc/*|/usr/share/man/*|/usr/share/pkgconfig/*|*/pkgconfig/*) continue ;; esac
      [[ -f $f && ! -L $f ]] || [[ -L $f && $f == *.so* ]] || continue
      mkdir -p "$carry/deps$(dirname "$f")"
      cp -a "$f" "$carry/deps$f"
      n=$((n + 1))
    done < <(dpkg -L "$pkg")
  done
  find "$carry/deps" -xtype l -delete  # links into packages not carried (libpcre2-8.so -> .so.0)
  echo "gpu-check: --pack: $n dependency files in $carry/deps"
}

if ((pack)); then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # libstdc++ linked in, so the binaries run whatever the GPU machine's image carries.
  cmake -S "$root" -B "$gpu_build" -G Ninja -DMK_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DMK_BUILD_TESTS=ON \
    -DMK_BUILD_BENCH=OFF -DMK_BUILD_EXAMPLES=OFF "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" \
    "${launcher[@]}" >/dev/null || exit 1
  targets=(--target mk)
  grep -q '^build mk_cuda_tests: phony' "$gpu_build/build.ninja" 2>/dev/null && targets+=(--target mk_cuda_tests)
  cmake --build "$gpu_build" -j "$jobs" "${targets[@]}" || exit 1
  rm -rf "$carry"
  mkdir -p "$carry/bin"
  for b in tools/mk tests/mk_cuda_tests; do
    if [[ -x $gpu_build/$b ]]; then
      strip --strip-unneeded -o "$carry/bin/$(basename "$b")" "$gpu_build/$b" || exit 1
    else
      echo "gpu-check: --pack: warning: $gpu_build/$b was not built (no such target yet?)" >&2
    fi
  done
  pack_deps || exit 1
  git -C "$root" describe --always --dirty >"$carry/commit" 2>/dev/null
  # The newest glibc symbol version the binaries reference: the GPU machine's glibc must be at least this.
  glibc_need=$(objdump -T "$carry"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "${glibc_need:-unknown}" >"$carry/glibc"
  echo "gpu-check: --pack: the binaries need ${glibc_need:-an unknown glibc} (recorded in $carry/glibc;" \
    "where ldd --version is older, the run rebuilds there)"
  size=$(du -sb "$carry" | cut -f1)
  echo "gpu-check: --pack: $carry holds $((size / 1048576)) MiB:"
  ls -l "$carry/bin"
  if ((size > 48 * 1048576)); then
    echo "gpu-check: --pack: error: $carry is over 48 MiB; the run tool carries 64 MiB with the whole tree" >&2
    exit 1
  fi
  echo "gpu-check: --pack: now the device tool's run with command tools/gpu-check.sh and carry [\"build/gpu-carry\"]"
  exit 0
fi

# ---- everything below logs to $OUT/gpu-check.log as well ----
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out" || exit 2
if [[ -z ${MK_GPU_CHECK_LOGGING:-} ]]; then
  export MK_GPU_CHECK_LOGGING=1
  "$self" "${args[@]}" 2>&1 | tee "$out/gpu-check.log"
  exit "${PIPESTATUS[0]}"
fi
# The default model (SmolLM2, fetched by tools/setup.sh) from the cache as it was, before the private one below.
default_model="${MK_CACHE:-$HOME/.cache/mk}/SmolLM2-135M-Instruct.Q4_1.gguf"
work=$(mktemp -d "${TMPDIR:-/tmp}/mk-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
export MK_CACHE="$work/cache" PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX="$work/pycache"
export TORCHINDUCTOR_CACHE_DIR="$work/inductor"
bench_jsonl="$out/bench.jsonl" stages_tsv="$work/stages.tsv"
: >"$bench_jsonl"
: >"$stages_tsv"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')
echo "gpu-check: glibc here: $(ldd --version 2>&1 | head -1); the carried binaries need $(cat "$carry/glibc" 2>/dev/null || echo '(not recorded)')"
echo "gpu-check: $(date -u +%FT%TZ) commit $commit carried build $(cat "$carry/commit" 2>/dev/null || echo '-'); out $out"

# ---- binaries: --bin DIR, else the carried ones, else (with --build) a fresh build here ----
find_bin() {  # NAME [DIR]: the first executable NAME under DIR's usual places
  local name=$1 dir=${2:-} d
  for d in "$dir/bin" "$dir/tools" "$dir/tests" "$dir"; do
    [[ -n $dir && -x $d/$name && -f $d/$name ]] && { echo "$d/$name"; return 0; }
  done
  return 1
}
runnable() {  # BIN: exists, every library resolves, and it starts
  [[ -x $1 ]] || { echo "missing"; return 1; }
  local missing
  missing=$(ldd "$1" 2>&1 | grep "not found")
  [[ -z $missing ]] || { echo "libraries not found: $(echo "$missing" | tr -s ' \t\n' ' ')"; return 1; }
  "$1" --help >/dev/null 2>&1 || { echo "'$1 --help' failed"; return 1; }
  echo "ok"
}
pick_binaries() {
  local dir=$1
  mk=$(find_bin mk "$dir") || mk="$dir/bin/mk"
  cuda_tests=$(find_bin "$tests_name" "$dir") || cuda_tests="$dir/bin/$tests_name"
  mk_state=$(runnable "$mk")
  tests_state=$(runnable "$cuda_tests")
}
build_here() {  # the rebuild row's limit bounds configure and build together
  local limit=${stage_limit_s[rebuild]} t0=$SECONDS
  echo "===== stage rebuild (limit $limit s): Release for sm_90a into $gpu_build with $jobs jobs"
  local deps="$carry/deps/usr" args=()
  [[ -d $deps ]] && args+=("-DCMAKE_PREFIX_PATH=$deps" "-DPCRE2_INCLUDE_DIR=$deps/include"
                           "-DPCRE2_STATIC_LIBRARY=$deps/lib/x86_64-linux-gnu/libpcre2-8.a")
  local rc=0
  timeout 30 cmake -S "$root" -B "$gpu_build" -G Ninja -DMK_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DMK_BUILD_TESTS=ON \
    -DMK_BUILD_BENCH=OFF -DMK_BUILD_EXAMPLES=OFF "${args[@]}" >"$work/configure.log" 2>&1 \
    || { tail -20 "$work/configure.log"; rc=1; }
  if ((rc == 0)); then
    local targets=(--target mk)
    grep -q '^build mk_cuda_tests: phony' "$gpu_build/build.ninja" && targets+=(--target mk_cuda_tests)
    timeout $((limit - (SECONDS - t0) > 5 ? limit - (SECONDS - t0) : 5)) \
      cmake --build "$gpu_build" -j "$jobs" "${targets[@]}" >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; rc=1; }
  fi
  local verdict=ok
  ((rc)) && verdict=FAILED
  echo "===== stage rebuild: $verdict ($((SECONDS - t0)) s)"
  printf 'rebuild\t%s\t%s\n' "$verdict" "$((SECONDS - t0))" >>"$stages_tsv"
  return $rc
}

if [[ -n $bin_dir ]]; then
  pick_binaries "$bin_dir"
else
  pick_binaries "$carry"
  if [[ $mk_state != ok || $tests_state != ok ]] || ((build)); then
    echo "gpu-check: carried binaries: mk $mk_state; mk_cuda_tests $tests_state"
    if ((dry_run)); then
      :
    elif ((!no_build)); then
      build_here && pick_binaries "$gpu_build"
    elif [[ -x $gpu_build/tools/mk ]]; then
      pick_binaries "$gpu_build"
    fi
  fi
fi
echo "gpu-check: mk            $mk ($mk_state)"
echo "gpu-check: $tests_name $cuda_tests ($tests_state)"

# ---- stage machinery: each step's timeout is capped by what is left of its stage ----
failures=0 stage_failed=0 stage_deadline=0
# Status lines go to stderr, so that a step's stdout can be redirected to a results file.
step() {  # LIMIT_S DESCRIPTION -- CMD...: run (or, with --dry-run, print) one command of the stage
  local limit=$(($1 * limit_scale)) what=$2
  shift 3
  if ((dry_run)); then
    printf '  would run (%ss): %s\n' "$limit" "$*" | sed "s|$root/||g; s|$work|\$WORK|g" >&2
    return 0
  fi
  local left=$((stage_deadline - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    echo "--- $what: SKIPPED, the stage is out of time" >&2
    stage_failed=1
    return 1
  fi
  echo "--- $what (limit ${limit}s): $*" >&2
  local t0=$SECONDS rc
  timeout -k 5 "$limit" "$@"
  rc=$?
  if ((rc == 0)); then
    echo "--- $what: ok ($((SECONDS - t0)) s)" >&2
  else
    if ((rc == 124 || rc == 137)); then
      echo "--- $what: TIMED OUT after ${limit}s" >&2
    else
      echo "--- $what: FAILED (exit $rc)" >&2
    fi
    stage_failed=1
  fi
  return $rc
}
# A step that needs the GPU machine's own tools (torch, transformers): named and skipped in a rehearsal.
gpu_step() {  # LIMIT DESCRIPTION -- CMD...
  if ((rehearse)); then
    echo "--- $2: SKIPPED (rehearsal: needs a GPU and torch/transformers)" >&2
    return 0
  fi
  step "$@"
}
# Catch2: a tag expression that matches no case fails (-w NoTests) rather than passing quietly.
catch_flags=(-w NoTests --use-colour no --durations yes)

stage_smoke() {
  if command -v nvidia-smi >/dev/null; then step 10 "nvidia-smi" -- nvidia-smi -L; fi
  step 15 "mk devices" -- "$mk" devices
  step 20 "[cuda][smoke]" -- "$cuda_tests" "[cuda][smoke]" "${catch_flags[@]}"
}
# The device cost model's constants measured by micro-kernels (runtime/cuda/calibrate.cu) into calibration.json,
# then the Llama-3.2-1B-shape BF16 predictions (decode step; 512-token prefill chunk) priced with the assumed
# constants and with the measured ones (calibration.md and calibration-prefill.md: the constants side by side, the
# re-priced per-op breakdown). Early, so later runs can use it.
stage_calibrate() {
  local cal="$out/calibration.json" mks="$work/calibrate.mks"
  step 6 "[cuda][calibrate]" -- "$cuda_tests" "[cuda][calibrate]" "${catch_flags[@]}"
  step 4 "mk devices --calibrate" -- "$mk" devices --calibrate "$cal" --backend "$cuda" || return
  step 3 "mk schedule llama-3.2-1b bf16 for the h200" -- "$mk" schedule -m synthetic:llama-3.2-1b:bf16 --target h200 \
    --backend cuda -o "$mks" --calibration "$cal" || return
  step 2 "mk inspect (assumed constants)" -- "$mk" inspect "$mks" >"$work/inspect-assumed.txt" || return
  step 2 "mk inspect --calibration" -- "$mk" inspect "$mks" --calibration "$cal" >"$out/calibration.md" || return
  # Issue 21's device target (<= 5 ms for a 512-token prefill chunk) hangs on assumed constants, l2_gbs and
  # sm_tensor_gflops above all (bench/RESULTS.md): the measured ones say which bound is real and so which redesign
  # the target needs. mk schedule prints the prediction with the assumed constants.
  step 3 "mk schedule llama-3.2-1b bf16 --prefill 512" -- "$mk" schedule -m synthetic:llama-3.2-1b:bf16 --target h200 \
    --backend cuda --prefill 512 -o "$work/calibrate-prefill.mks" >"$work/schedule-prefill.txt" || return
  step 2 "mk inspect prefill --calibration" -- "$mk" inspect "$work/calibrate-prefill.mks" --calibration "$cal" \
    >"$out/calibration-prefill.md" || return
  ((dry_run)) && return
  {
    echo "assumed:  $(grep '^cost model' "$work/inspect-assumed.txt")"
    echo "measured: $(grep '^cost model' "$out/calibration.md")"
    echo "assumed (prefill 512):  $(grep '^device cost model' "$work/schedule-prefill.txt")"
    echo "measured (prefill 512): $(grep '^cost model' "$out/calibration-prefill.md")"
    echo "  $(grep '^prefill bounds' "$out/calibration-prefill.md")"
  } | tee -a "$out/calibration.md"
  sed -n '/^calibration /,/^target /p' "$out/calibration.md"
}
# compute-sanitizer from PATH or beside nvcc.
find_sanitizer() {
  local d
  command -v compute-sanitizer 2>/dev/null && return 0
  for d in /usr/local/cuda/bin "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")"; do
    [[ -x $d/compute-sanitizer ]] && { echo "$d/compute-sanitizer"; return 0; }
  done
  echo compute-sanitizer
  return 1
}
stage_sanitize() {
  local cs tool log before n_skipped=0
  cs=$(find_sanitizer)
  for tool in memcheck synccheck racecheck; do
    local cmd=("$cs" --tool "$tool" --error-exitcode 1 --print-limit 20 "$cuda_tests" "[cuda][sanitize]" "${catch_flags[@]}")
    if ((dry_run)); then
      step 15 "compute-sanitizer $tool" -- "${cmd[@]}"
      continue
    fi
    if [[ ! -x $cs ]]; then
      echo "--- compute-sanitizer $tool: SKIPPED (no compute-sanitizer on this machine)" >&2
      n_skipped=$((n_skipped + 1))
      continue
    fi
    log="$out/sanitize-$tool.log" before=$stage_failed
    # shellcheck disable=SC2016
    step 15 "compute-sanitizer $tool" -- bash -c '"${@:2}" >"$1" 2>&1; rc=$?; tail -n 15 "$1"; exit $rc' _ "$log" "${cmd[@]}"
    # Some runtimes refuse the sanitizer ("Device not supported"): that says nothing about our code.
    if grep -qiE 'device not supported|not supported on this (device|platform)|unable to (attach|find injection)' "$log"; then
      stage_failed=$before
      n_skipped=$((n_skipped + 1))
      echo "--- compute-sanitizer $tool: SKIPPED (the sanitizer cannot attach to this device: $(grep -iE -m1 'not supported|unable to' "$log"))" >&2
    fi
  done
  ((n_skipped == 3)) && stage_verdict=skipped
}
stage_ops() { step 30 "[cuda][ops]" -- "$cuda_tests" "[cuda][ops]" "${catch_flags[@]}"; }
stage_forward() {
  step 30 "[cuda][forward]" -- "$cuda_tests" "[cuda][forward]" "${catch_flags[@]}"
  # Prefill chunks (every token's logits, the LM head in token blocks; a bf16 KV cache; the chunk limit) against the
  # CPU's prefill and token-by-token logits; the TP ones run in the tp stage. ~20 programs of tiny models (48 s on the
  # emulator): 15 s, as a timeout here would skip the benchmarks.
  step 15 "[cuda][prefill]" -- "$cuda_tests" "[cuda][prefill]~[tp]" "${catch_flags[@]}"
  # The prompt path on the device: a 512-token prompt as one chunk of the prefill step (ms/token and tokens/s).
  mk_bench bf16 15 "-p 512 -n 0 -r 1" --backend cuda -b 512
}
stage_resident() {
  step 20 "[cuda][resident]" -- "$cuda_tests" "[cuda][resident]" "${catch_flags[@]}"
  gpu_step 15 "HF model by transformers" -- python3 "$root/tests/reference/hf_tiny_model.py" "$work/hf"
  gpu_step 10 "[cuda][hf]" -- env "MK_HF_DIR=$work/hf" "$cuda_tests" "[cuda][hf]" "${catch_flags[@]}"
  # Each CLI mode end to end on a tiny model (32 steps), the resident one with a trace.
  local tiny=synthetic:tiny-llama3:f32 flags tokens="-p 16 -n 16"
  ((rehearse)) && tokens="-p 4 -n 4"  # the kernel-per-op baseline launches a grid of fibers per op stage
  for flags in "--backend $cuda --trace $work/trace.json" "--backend $cuda --stepwise" "--backend $cuda_kernels" \
               "--backend $cuda_kernels --graph"; do
    # shellcheck disable=SC2086
    step 10 "mk bench $flags" -- "$mk" bench -m "$tiny" $tokens -r 1 $flags
  done
  if ((!dry_run)) && [[ -f $work/trace.json ]]; then
    local size
    size=$(stat -c %s "$work/trace.json")
    echo "gpu-check: trace of the tiny run: $size bytes"
    ((size < 8 * 1048576)) && cp "$work/trace.json" "$out/trace.json"
  fi
}
stage_tp() {
  # Without the default model (it is over the carry limit), its cases are left out and the CLI
  # comparison uses a synthetic f32 model of its shape (f32: CPU and GPU differ only in summation order).
  local spec="[cuda][tp]" model=$default_model
  if ((rehearse)); then  # SmolLM2's 30 layers at TP 3 take minutes on the emulator
    spec="[cuda][tp]~[model]" model=synthetic:smollm2-135m:f32:layers=2:vocab=4096:seed=41
  elif [[ ! -f $default_model ]]; then
    echo "gpu-check: $default_model is not on this machine: [model] cases skipped, the CLI uses a synthetic model" >&2
    spec="[cuda][tp]~[model]" model=synthetic:smollm2-135m:f32:layers=4:seed=41
  fi
  step 20 "$spec" -- env "MK_CACHE=$(dirname "$default_model")" "$cuda_tests" "$spec" "${catch_flags[@]}"
  local gen=(generate -m "$model" -p "The capital of France is" -n 16 --temp 0 --ignore-eos -c 256)
  ((rehearse)) && gen=(generate -m "$model" -p "The" -n 4 --temp 0 --ignore-eos -c 256)
  step 10 "mk generate --backend cpu" -- "$mk" "${gen[@]}" --backend cpu --cpu-dots exact >"$work/tp-cpu.txt"
  step 10 "mk generate --backend $cuda --tp-loopback 3" -- "$mk" "${gen[@]}" --backend "$cuda" --tp-loopback 3 \
    >"$work/tp-cuda.txt"
  step 5 "the same text" -- diff "$work/tp-cpu.txt" "$work/tp-cuda.txt"
}
mk_bench() {  # DTYPE LIMIT "TEST FLAGS" BACKEND FLAGS...: mk bench of the synthetic model, into bench.jsonl
  local dtype=$1 limit=$2 tests=$3
  shift 3
  local file="$work/mk-bench.$dtype.$RANDOM.json" model="$work/models/$bench_shape.$dtype.gguf"
  [[ -f $model ]] || model="synthetic:$bench_shape:$dtype$bench_keys"  # before the bench stage writes it (forward)
  if ((rehearse)); then  # a few tokens, one repetition, the emulated backends
    tests=$(sed -E 's/-n 128/-n 2/; s/-p 512/-p 8/; s/-r 3/-r 1/' <<<"$tests")
    set -- $(sed -E 's/(^| )cuda-kernels( |$)/\1cuda-kernels-emu\2/; s/(^| )cuda( |$)/\1cuda-emu\2/' <<<"$*")
  fi
  # shellcheck disable=SC2086
  step "$limit" "mk bench $dtype $tests $*" -- "$mk" bench -m "$model" $tests -o json "$@" >"$file"
  local rc=$?
  ((dry_run)) || python3 "$root/tools/gpu_check_report.py" wrap-mk "$file" --dtype "$dtype" --flags "$*" \
    --ctx-map pp512=512,tg128=128 --command "mk bench -m synthetic:$bench_shape:$dtype$bench_keys $tests $*" >>"$bench_jsonl"
  return $rc
}
stage_bench() {
  gpu_step 15 "copy bandwidth" -- python3 "$root/bench/torch_baseline.py" --modes copy >"$work/copy.json"
  ((dry_run || rehearse)) || tee -a "$bench_jsonl" <"$work/copy.json"
  mkdir -p "$work/models"
  local dtype
  for dtype in bf16 q8_0 q4_1; do
    if [[ $dtype != bf16 ]] && ((rehearse)); then
      echo "--- $dtype: SKIPPED (rehearsal: the bf16 comparison only; the emulator is slow)" >&2
      continue
    fi
    if [[ $dtype != bf16 ]] && ((!dry_run && stage_deadline - SECONDS < 20)); then
      echo "--- $dtype: skipped, $((stage_deadline - SECONDS)) s left in the stage" >&2
      continue
    fi
    step 15 "mk synth $dtype" -- "$mk" synth "synthetic:$bench_shape:$dtype$bench_keys" \
      -o "$work/models/$bench_shape.$dtype.gguf" || continue
    if [[ $dtype == bf16 ]]; then
      # The headline figure: tg128 with the warm-up mk bench always runs, then 3 repetitions.
      mk_bench "$dtype" 10 "-p 0 -n 128 -r 3" --backend cuda
      mk_bench "$dtype" 8 "-p 0 -n 128 -r 1" --backend cuda-kernels
      mk_bench "$dtype" 8 "-p 0 -n 128 -r 1" --backend cuda-kernels --graph
      # pp512 (issue 21) as one prefill chunk (-b 512), as torch runs the prompt in one forward; the kernel-per-op
      # rows replay the prefill step's stages (--graph: captured once, like decode's). Each run should be mostly
      # mk's start (the 2.5 GB model read and uploaded), as the tg rows' are: the prompt is ~1 TFLOP, milliseconds
      # (estimated; no GPU run yet).
      mk_bench "$dtype" 8 "-p 512 -n 0 -r 1" --backend cuda -b 512
      mk_bench "$dtype" 8 "-p 512 -n 0 -r 1" --backend cuda-kernels -b 512
      mk_bench "$dtype" 8 "-p 512 -n 0 -r 1" --backend cuda-kernels --graph -b 512
      # One process, one model build for both: prefill adds 2 warm-up and 5 timed 512-token forwards of ~1 TFLOP.
      gpu_step 25 "torch eager, tg and pp512" -- python3 "$root/bench/torch_baseline.py" --modes eager,prefill \
        --ctx 128 -n 32 --pp 512 --reps 5 >"$work/torch.jsonl"
      ((dry_run || rehearse)) || tee -a "$bench_jsonl" <"$work/torch.jsonl"
      # The one table issues 20 and 21 ask for, from the rows above (the same shape, this run): tg128, the
      # megakernel against graphs+PDL (target >= 1.2x), kernels+PDL and torch eager; pp512, against the same two
      # and torch eager prefill. A rehearsal's tg runs 2 tokens and its pp 8 (mk_bench).
      local tg_ctx=128 pp=512 note=""
      ((rehearse)) && tg_ctx=2 pp=8 note="a rehearsal on the CUDA emulator, not a measurement"
      ((dry_run)) || python3 "$root/tools/gpu_check_report.py" compare "$bench_jsonl" --dtype bf16 --ctx "$tg_ctx" \
        --pp "$pp" --note "$note" | tee "$out/baseline.md" >&2
    else
      mk_bench "$dtype" 8 "-p 0 -n 128 -r 1" --backend cuda
    fi
  done
}
stage_compiled() {
  gpu_step 15 "torch compiled" -- python3 "$root/bench/torch_baseline.py" --modes compiled --ctx 128 -n 32 \
    >"$work/torch-compiled.jsonl"
  ((dry_run || rehearse)) || tee -a "$bench_jsonl" <"$work/torch-compiled.jsonl"
}

# ---- dry run: what can be checked without a GPU ----
if ((dry_run)); then
  dry_fail=0
  check() {  # DESCRIPTION CMD...
    local what=$1
    shift
    if "$@" >"$work/check.log" 2>&1; then
      echo "ok: $what"
    else
      echo "FAILED: $what"
      sed 's/^/    /' "$work/check.log" | tail -20
      dry_fail=1
    fi
  }
  help_has_flags() {
    local help
    help=$("$mk" bench --help) || return 1
    for f in --backend cuda-kernels --stepwise --graph --watchdog-ms --trace; do
      grep -q -- "$f" <<<"$help" || { echo "mk bench --help does not mention $f"; return 1; }
    done
    # Captured first: `mk ... --help | grep -q` under pipefail fails when grep exits before mk's last write
    # (SIGPIPE), which the help text, past 4 KiB since --kv-type, now makes likely.
    help=$("$mk" generate --help) || return 1
    grep -q -- --watchdog-ms <<<"$help" || { echo "mk generate --help lacks --watchdog-ms"; return 1; }
    grep -q -- --tp-loopback <<<"$help" || { echo "mk generate --help lacks --tp-loopback"; return 1; }
    # A bad value is refused by the parser, before any model is opened.
    if "$mk" bench --backend no-such-backend -m /nonexistent >/dev/null 2>&1; then
      echo "mk accepted --backend no-such-backend"; return 1
    fi
  }
  echo "== dry run"
  check "mk present and runnable ($mk_state)" test "$mk_state" = ok
  check "mk_cuda_tests present and runnable ($tests_state)" test "$tests_state" = ok
  if [[ $tests_state == ok ]]; then
    # Catch2 v2's --list-tags exits with the number of tags, so its output is what counts.
    "$cuda_tests" --list-tags >"$work/tags.txt" 2>&1
    for tag in cuda smoke calibrate sanitize ops forward resident tp hf; do
      grep -q "\[$tag\]" "$work/tags.txt" || echo "warning: mk_cuda_tests has no [$tag] test case yet"
    done
  fi
  [[ $mk_state == ok ]] && check "mk --help" "$mk" --help
  [[ $mk_state == ok ]] && check "mk bench/generate take the backend flags" help_has_flags
  [[ $mk_state == ok ]] && check "mk bench runs a tiny synthetic model on the CPU" \
    "$mk" bench -m synthetic:tiny-llama:f32 -p 4 -n 4 -r 1 --backend cpu -o json
  for py in bench/torch_baseline.py tests/reference/hf_tiny_model.py tools/check-ptxas.py tools/gpu_check_report.py; do
    check "python3 -m py_compile $py" python3 -m py_compile "$root/$py"
  done
  check "tools/check-ptxas.py --self-test" python3 "$root/tools/check-ptxas.py" --self-test
  check "tools/gpu_check_report.py self-test" python3 "$root/tools/gpu_check_report.py" self-test
  check "bench/torch_baseline.py --dry-run" python3 "$root/bench/torch_baseline.py" --dry-run
  check "bench/torch_baseline.py takes the bench stage's flags" python3 "$root/bench/torch_baseline.py" --dry-run \
    --modes eager,prefill --ctx 128 -n 32 --pp 512 --reps 5
  check "bash -n tools/gpu-check.sh" bash -n "$self"
fi

# ---- the stages ----
selected=("${all_stages[@]}")
((${#only[@]})) && selected=("${only[@]}")
total_limit=0
for s in "${selected[@]}"; do total_limit=$((total_limit + stage_limit_s[$s])); done
echo "== stages: ${selected[*]} (limits add up to ${total_limit} s)"
print_limits
echo "$early_stop"
smoke_failed=0 correctness_failed=0
skip_stage() {  # STAGE WHY
  echo "===== stage $1: SKIPPED ($2)"
  printf '%s\tskipped\t0\n' "$1" >>"$stages_tsv"
}
for s in "${all_stages[@]}"; do
  [[ " ${selected[*]} " == *" $s "* ]] || continue
  echo
  if ((!dry_run)); then
    if ((smoke_failed)); then skip_stage "$s" "smoke failed"; continue; fi
    if [[ $s == bench || $s == compiled ]] && ((correctness_failed)); then
      skip_stage "$s" "a correctness stage failed"; continue
    fi
    if ((stop_on_failure && failures)); then skip_stage "$s" "--stop-on-failure"; continue; fi
    if [[ $s == compiled ]] && ((SECONDS + stage_limit_s[$s] * limit_scale > (budget_s - margin_s) * limit_scale)); then
      skip_stage "$s" "$(((budget_s - margin_s) * limit_scale - SECONDS)) s left of the run's budget"; continue
    fi
  fi
  echo "===== stage $s (limit ${stage_limit_s[$s]} s): ${stage_about[$s]}"
  stage_failed=0 stage_verdict=ok
  stage_deadline=$((SECONDS + stage_limit_s[$s] * limit_scale))
  t0=$SECONDS
  if ((!dry_run)) && [[ $mk_state != ok || ($s != bench && $s != compiled && $tests_state != ok) ]]; then
    echo "gpu-check: the binaries are not runnable (mk: $mk_state; mk_cuda_tests: $tests_state);" \
      "run tools/gpu-check.sh --pack here, or let it rebuild (no --no-build)"
    stage_failed=1
  else
    "stage_$s"
  fi
  result=$stage_verdict
  if ((stage_failed)); then
    result=FAILED
    failures=$((failures + 1))
    [[ $s == smoke ]] && smoke_failed=1
    [[ $correctness_stages == *" $s "* ]] && correctness_failed=1
  fi
  ((dry_run)) && result=planned
  echo "===== stage $s: $result ($((SECONDS - t0)) s)"
  printf '%s\t%s\t%s\n' "$s" "$result" "$((SECONDS - t0))" >>"$stages_tsv"
done

echo
echo "results: $out/results.md"
if ((dry_run)); then
  python3 "$root/tools/gpu_check_report.py" results --header-only
  ((dry_fail)) && { echo "gpu-check: dry run FAILED"; exit 1; }
  echo "gpu-check: dry run ok"
  exit 0
fi
device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
((rehearse)) && device_name="CUDA emulator (rehearsal, $(nproc) cores; not a measurement)"
python3 "$root/tools/gpu_check_report.py" results "$bench_jsonl" --date "$(date -u +%F)" --commit "$commit" \
  --device "${device_name:-?}" --model "synthetic:$bench_shape$bench_keys" | tee "$out/results.md"
echo
python3 "$root/tools/gpu_check_report.py" summary "$bench_jsonl" "$stages_tsv" | tee "$out/summary.md"
echo
[[ -s $out/baseline.md ]] && { cat "$out/baseline.md"; echo; }
# The calibrate stage's verdict on the cost model, in the summary the closing note quotes.
if [[ -s $out/calibration.md ]]; then
  { echo "cost model, Llama-3.2-1B BF16 on the h200 target (calibration.md has the constants):"
    grep -E -A1 '^(assumed|measured)( \(prefill 512\))?: ' "$out/calibration.md" | grep -v '^--$'; echo; } |
    tee -a "$out/summary.md"
fi
if ((failures)); then
  echo "gpu-check: $failures stage(s) FAILED; logs in $out"
  exit 1
fi
echo "gpu-check: all stages passed; logs in $out"

#!/usr/bin/env bash
# Builds mk and runs the whole test suite (what CI runs). Needs tools/setup.sh --test first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MK_CACHE:-$HOME/.cache/mk}
build=${MK_TEST_BUILD:-$root/build/test}
jobs=$(nproc)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

echo "== build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMK_WERROR=ON \
  -DMK_PYTHON="$cache/oracle-venv/bin/python" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

echo "== no GPU driver needed: mk must not link libcuda (nor libraries the GPU machine lacks)"
if ldd "$build/tools/mk" | grep -E 'libcuda\.so|libpcre2|libfmt'; then
  echo "run-tests: error: mk links libcuda, libpcre2 or libfmt dynamically" >&2
  exit 1
fi

echo "== tests"
ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 900

echo "== install, then build examples/embed against the installed package and run it"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cmake --install "$build" --prefix "$stage/prefix" >/dev/null
embed_launcher=()
command -v ccache >/dev/null && embed_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root/examples/embed" -B "$stage/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$stage/prefix" "${embed_launcher[@]}" >/dev/null
cmake --build "$stage/embed" -j "$jobs" >/dev/null
reply=$("$stage/embed/embed" -n 24 2>/dev/null)
printf 'embed: %s\n' "$reply"
if ! grep -q Paris <<<"$reply"; then
  echo "run-tests: error: examples/embed's reply to 'What is the capital of France?' does not mention Paris" >&2
  exit 1
fi

echo "== examples/c (the C API) against the installed package"
cmake -S "$root/examples/c" -B "$stage/c-example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$stage/prefix" "${embed_launcher[@]}" >/dev/null
cmake --build "$stage/c-example" -j "$jobs" >/dev/null
(cd "$stage" && "$stage/c-example/c_example" -n 16 2>/dev/null) | tail -2

# ---- reliability: the CPU test suite under sanitizers, then (optionally) the fuzz targets ----
# ASan+UBSan: every CPU test but [slow]; TSan: the interpreter and CPU-program tests, where the threads are.
# Both run by default (MK_SANITIZERS=0 skips them); MK_FUZZ_SECONDS=N also runs tools/fuzz.sh N (0: skip).
# ASan builds at -O1 with line tables only (-g1: file:line in its reports): on the 2-core machine with a cold
# ccache (2026-12-07) its build took 362 s instead of 776 at -O2 -g, its tests 294 s instead of 219. TSan stays at
# -O2 -g: its two test programs built and ran in 233 s at -O1 -g1 against 250, within the noise.
asan_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
if [ "${MK_SANITIZERS:-1}" != 0 ]; then
  san_start=$SECONDS
  echo "== sanitizers: address,undefined ($root/build/asan)"
  cmake -S "$root" -B "$root/build/asan" -G Ninja "${asan_flags[@]}" -DMK_CUDA=OFF \
    -DMK_SANITIZE=address,undefined -DMK_BUILD_BENCH=OFF -DMK_BUILD_EXAMPLES=OFF '-DMK_TEST_SPEC=~[cuda]~[slow]' \
    -DMK_PYTHON="$cache/oracle-venv/bin/python" "${launcher[@]}" >/dev/null
  cmake --build "$root/build/asan" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build/asan" -j "$jobs" --output-on-failure --timeout 1800
  echo "== sanitizers: address,undefined took $((SECONDS - san_start)) s"

  tsan_start=$SECONDS
  echo "== sanitizers: thread ($root/build/tsan)"
  cmake -S "$root" -B "$root/build/tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMK_CUDA=OFF \
    -DMK_SANITIZE=thread -DMK_BUILD_BENCH=OFF -DMK_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
  cmake --build "$root/build/tsan" -j "$jobs" --target mk_runtime_tests mk_program_tests
  mkdir -p "$root/build/tsan/testdata"
  # [oracle] cases need the Python fixtures of a ctest run; the threads they exercise are the same.
  for t in mk_runtime_tests mk_program_tests; do
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$root/build/tsan/tests/$t" '~[cuda]~[slow]~[oracle]'
  done
  echo "== sanitizers: thread took $((SECONDS - tsan_start)) s"
fi
if [ "${MK_FUZZ_SECONDS:-0}" != 0 ]; then
  fuzz_start=$SECONDS
  "$root/tools/fuzz.sh" "$MK_FUZZ_SECONDS"
  echo "== fuzz took $((SECONDS - fuzz_start)) s"
fi

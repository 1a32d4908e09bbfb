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
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMK_PYTHON="$cache/oracle-venv/bin/python" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

echo "== no GPU driver needed: mk must not link libcuda"
if ldd "$build/tools/mk" | grep -E 'libcuda\.so|libpcre2'; then
  echo "run-tests: error: mk links libcuda or libpcre2 dynamically" >&2
  exit 1
fi

echo "== tests"
ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 900

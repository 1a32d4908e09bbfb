#!/usr/bin/env python3
"""The include-direction check (ctest tools.check_includes): every quoted #include in the tree against
the layering rules of docs/architecture.md. Prints one line per broken rule and exits 1; --self-test plants
one breach of each rule in a scratch tree and fails unless every one is reported."""
import argparse
import os
import re
import sys
import tempfile

# Layers, bottom to top: a file may include its own layer and those below, never above.
LAYERS = ["models", "instructions", "scheduler", "runtime", "tools"]
SOURCE_EXTENSIONS = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".def")
HOST_EXTENSIONS = (".cpp",)  # compiled by the host compiler alone; .cu goes to nvcc
SCANNED_DIRS = LAYERS + ["include", "tests", "bench", "examples"]
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    """The layer index of a repository-relative path, or None for tests/bench/examples (above every layer)."""
    if path == "include/mk/error.hpp":
        return 0  # mk::Error: the standard library only, so every layer may throw it
    if path.startswith("include/mk/"):
        return LAYERS.index("runtime")  # the public API, implemented in runtime/api/
    top = path.split("/", 1)[0]
    return LAYERS.index(top) if top in LAYERS else None


def in_emulator(path):
    # The CUDA emulator compiles device code with the host compiler: its folders may include .cuh and
    # runtime/cuda/ sources (runtime/emu/, tests/emu/).
    return "/emu/" in "/" + path


# Include roots besides the repository root: the public headers, the emulator's CUDA-header twins.
INCLUDE_ROOTS = ["", "include", "runtime/emu/include"]


def resolve(root, including, name):
    candidates = [os.path.join(r, name) for r in INCLUDE_ROOTS] + [os.path.join(os.path.dirname(including), name)]
    for candidate in candidates:
        candidate = os.path.normpath(candidate)
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def scan(root):
    """{path: [(line number, included name, resolved path or None)]} for every source file under SCANNED_DIRS."""
    includes = {}
    for top in SCANNED_DIRS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
            for file in sorted(files):
                if not file.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(folder, file), root)
                rows = []
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m:
                            rows.append((number, m.group(1), resolve(root, path, m.group(1))))
                includes[path] = rows
    return includes


def direct_breaches(path, target):
    """The rules one include edge breaks (messages), from the including and included paths alone."""
    out = []
    src, dst = layer_of(path), layer_of(target)
    if src is not None and dst is not None and dst > src:
        out.append(f"{LAYERS[src]} includes {LAYERS[dst]} (layers run models -> instructions -> scheduler -> "
                   "runtime -> tools; nothing includes upward)")
    if path.startswith("runtime/cuda/") and target.startswith("runtime/cpu/"):
        out.append("runtime/cuda includes runtime/cpu (what both backends share lives in runtime/)")
    if path.startswith("runtime/cpu/") and target.startswith("runtime/cuda/"):
        out.append("runtime/cpu includes runtime/cuda (what both backends share lives in runtime/)")
    if path.startswith("tools/") and target.startswith("runtime/api/"):
        out.append("tools includes runtime/api internals (use the public API in include/mk/)")
    if path.startswith("include/mk/") and not target.startswith("include/mk/"):
        out.append("a public header includes a non-public one (installed headers include only include/mk/)")
    return out


def check(root):
    includes = scan(root)
    errors = []
    for path, rows in includes.items():
        for number, name, target in rows:
            if target is None:
                errors.append(f'{path}:{number}: #include "{name}": not found in the tree')
                continue
            for message in direct_breaches(path, target):
                errors.append(f'{path}:{number}: #include "{name}": {message}')
    # Host files reach no device code, directly or through the headers they include.
    for path in includes:
        if not path.endswith(HOST_EXTENSIONS) or in_emulator(path):
            continue
        seen, stack = {path}, [(path, [])]
        while stack:
            current, chain = stack.pop()
            for number, name, target in includes.get(current, []):
                if target is None or target in seen:
                    continue
                seen.add(target)
                where = chain + [f"{current}:{number}"]
                if target.endswith(".cuh"):
                    errors.append(f'{where[0]}: #include chain {" -> ".join(where)} -> {target}: a host .cpp '
                                  "includes device code (.cuh); share host-visible types through a .hpp")
                else:
                    stack.append((target, where))
    return errors


PLANTED = {
    # One breach of each rule; the check must report every file named here.
    "models/bad_up.hpp": '#include "scheduler/ok.hpp"\n',
    "runtime/cuda/bad_sideways.hpp": '#include "runtime/cpu/ok.hpp"\n',
    "runtime/cpu/bad_host.cpp": '#include "runtime/ok.hpp"\n',  # runtime/ok.hpp reaches a .cuh
    "tools/bad_tool.cpp": '#include "runtime/api/ok.hpp"\n',
    "include/mk/bad_public.hpp": '#include "models/ok.hpp"\n',
    "models/bad_missing.hpp": '#include "models/nowhere.hpp"\n',
}
CLEAN = {
    "models/ok.hpp": '#include "include/mk/error.hpp"\n',
    "scheduler/ok.hpp": '#include "models/ok.hpp"\n',
    "runtime/cpu/ok.hpp": "",
    "runtime/api/ok.hpp": "",
    "runtime/ok.hpp": '#include "instructions/ok.cuh"\n',
    "instructions/ok.cuh": '#include "instructions/ok.hpp"\n',
    "instructions/ok.hpp": '#include "mk/error.hpp"\n',
    "include/mk/error.hpp": "",
    "runtime/emu/ok.cpp": '#include "runtime/cuda/ok.cuh"\n#include "instructions/ok.cuh"\n',
    "runtime/cuda/ok.cuh": "",
    "tools/ok.cpp": '#include "mk/error.hpp"\n#include "runtime/cpu/ok.hpp"\n',
}


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for path, text in {**PLANTED, **CLEAN}.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        errors = check(root)
        for e in errors:
            print("planted:", e)
        flagged = {e.split(":", 1)[0] for e in errors}
        missed = sorted(set(PLANTED) - flagged)
        wrong = sorted(flagged - set(PLANTED))
        if missed or wrong:
            print(f"check-includes self-test FAILED: missed {missed}, flagged clean files {wrong}")
            return 1
    print(f"check-includes self-test: all {len(PLANTED)} planted breaches reported, no clean file flagged")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    errors = check(os.path.abspath(args.root))
    for e in errors:
        print(e)
    if errors:
        print(f"check-includes: {len(errors)} include(s) break the layering rules (docs/architecture.md, 'Layering')")
        return 1
    print("check-includes: every include follows the layering rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

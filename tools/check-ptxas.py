#!/usr/bin/env python3
"""Checks one kernel's resources in an `nvcc -Xptxas -v` log against the H200's limits.

Fails (exit 1, one line per problem) when the kernel has a stack frame, spills, local memory,
more registers x threads than an SM's 65536-register file, or static + dynamic shared memory over the
232448-byte opt-in limit per block. Usage:

    tools/check-ptxas.py LOG --kernel NAME --threads N --smem BYTES [--arch sm_90a]
    tools/check-ptxas.py --self-test

NAME is a mangled name or a piece of the demangled one (`interpreter_kernel`); it must pick out one
function, or with --each at least one (every function it matches is checked: a template's instantiations). Exit 0: within limits; 1: over a limit; 2: bad usage, or the kernel is not in the log.
"""
import argparse
import re
import shutil
import subprocess
import sys

REGISTERS_PER_SM = 65536
SMEM_OPTIN_PER_BLOCK = 232448  # H200 (sm_90): 227 KiB opt-in dynamic + static per block

# nvcc 13 (ptxas) prints, per entry function and per target:
#   ptxas info    : Compiling entry function '_Z...' for 'sm_90a'
#   ptxas info    : Function properties for _Z...
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 34 registers, used 1 barriers, 256 bytes cumulative stack size, 384 bytes smem
# Older ptxas add "N bytes cmem[0]" and "N bytes lmem" to the "Used" line.
RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
RE_PROPS = re.compile(r"Function properties for (\S+)")
RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
RE_USED = re.compile(r"Used (\d+) registers")
RE_BYTES = re.compile(r"(\d+) bytes (smem|lmem|cumulative stack size)")


class Kernel:
    def __init__(self, name, arch):
        self.name, self.arch = name, arch
        self.registers = None
        self.stack_frame = self.spill_stores = self.spill_loads = 0
        self.smem = self.lmem = self.cumulative_stack = 0


def parse(text):
    """Entry functions in log order, one per (name, arch)."""
    kernels, current, props_for = [], None, None
    for line in text.splitlines():
        if m := RE_ENTRY.search(line):
            current = Kernel(m.group(1), m.group(2))
            kernels.append(current)
            props_for = None
            continue
        if m := RE_PROPS.search(line):
            props_for = m.group(1)
            continue
        if current is None:
            continue
        if (m := RE_FRAME.search(line)) and props_for == current.name:
            current.stack_frame, current.spill_stores, current.spill_loads = map(int, m.groups())
            continue
        if m := RE_USED.search(line):
            if current.registers is not None:
                continue  # a "Used" line after this entry's own belongs to something else
            current.registers = int(m.group(1))
            for value, what in RE_BYTES.findall(line):
                if what == "smem":
                    current.smem = int(value)
                elif what == "lmem":
                    current.lmem = int(value)
                else:
                    current.cumulative_stack = int(value)
    return [k for k in kernels if k.registers is not None]


def demangle(names):
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return dict(zip(names, names))
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
        if len(lines) == len(names):
            return dict(zip(names, lines))
    except (OSError, subprocess.SubprocessError):
        pass
    return dict(zip(names, names))


def select(kernels, name, arch):
    if arch:
        kernels = [k for k in kernels if k.arch == arch]
    exact = [k for k in kernels if k.name == name]
    if exact:
        return exact
    readable = demangle(sorted({k.name for k in kernels}))
    return [k for k in kernels if name in k.name or name in readable[k.name]]


def problems(k, threads, dynamic_smem):
    out = []
    if k.stack_frame:
        out.append(f"{k.stack_frame} bytes stack frame")
    if k.cumulative_stack:
        out.append(f"{k.cumulative_stack} bytes cumulative stack size")
    if k.spill_stores or k.spill_loads:
        out.append(f"{k.spill_stores} bytes spill stores, {k.spill_loads} bytes spill loads")
    if k.lmem:
        out.append(f"{k.lmem} bytes local memory (lmem)")
    # Registers are handed out per warp in units of 256 (8 per thread): 85 registers x 768 threads
    # (65280) still does not launch, since each warp takes 88 x 32.
    per_warp = -(-k.registers * 32 // 256) * 256
    allocated = per_warp * -(-threads // 32)
    if k.registers * threads > REGISTERS_PER_SM or allocated > REGISTERS_PER_SM:
        out.append(f"{k.registers} registers x {threads} threads = {k.registers * threads} "
                   f"({allocated} as allocated per warp) > {REGISTERS_PER_SM}")
    if k.smem + dynamic_smem > SMEM_OPTIN_PER_BLOCK:
        out.append(f"{k.smem} bytes static + {dynamic_smem} dynamic shared memory = {k.smem + dynamic_smem} "
                   f"> {SMEM_OPTIN_PER_BLOCK}")
    return out


def check(text, name, threads, dynamic_smem, arch=None, source="log", out=sys.stdout, each=False):
    """Returns the exit code and prints the verdict."""
    kernels = parse(text)
    chosen = select(kernels, name, arch)
    if not chosen:
        known = ", ".join(sorted({k.name for k in kernels})) or "none"
        print(f"check-ptxas: error: {source}: no entry function matching '{name}'"
              f"{' for ' + arch if arch else ''} (entry functions: {known})", file=out)
        return 2
    if len({k.name for k in chosen}) > 1 and not each:
        print(f"check-ptxas: error: {source}: '{name}' matches several functions: "
              f"{', '.join(sorted({k.name for k in chosen}))}", file=out)
        return 2
    status = 0
    for k in chosen:
        found = problems(k, threads, dynamic_smem)
        summary = (f"{k.name} ({k.arch}): {k.registers} registers x {threads} threads, {k.smem} + {dynamic_smem} "
                   f"bytes smem, {k.stack_frame} bytes stack, {k.spill_stores}/{k.spill_loads} bytes spilled")
        if found:
            status = 1
            print(f"check-ptxas: FAIL {summary}", file=out)
            for p in found:
                print(f"check-ptxas:   {p}", file=out)
        else:
            print(f"check-ptxas: ok {summary}", file=out)
    return status


# Canned nvcc 13.0 `-Xptxas -v` output (the format seen on this project's machines, 2026-11).
SELF_TEST_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2mk4cuda18interpreter_kernelEPKNS0_6ParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN2mk4cuda18interpreter_kernelEPKNS0_6ParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 384 bytes smem
ptxas info    : Compile time = 812.532 ms
ptxas info    : Compiling entry function '_Z7spillerPfPKfi' for 'sm_90a'
ptxas info    : Function properties for _Z7spillerPfPKfi
    448 bytes stack frame, 440 bytes spill stores, 484 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 448 bytes cumulative stack size
ptxas info    : Compile time = 207.904 ms
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z6legacyPf' for 'sm_90a'
ptxas info    : Function properties for _Z6legacyPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 1024 bytes smem, 400 bytes cmem[0], 16 bytes lmem
ptxas info    : Compiling entry function '_Z6roundsPf' for 'sm_90a'
ptxas info    : Function properties for _Z6roundsPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 85 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function '_Z7matvec1Pf' for 'sm_90a'
ptxas info    : Function properties for _Z7matvec1Pf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers, used 0 barriers
ptxas info    : Compiling entry function '_Z7matvec2Pf' for 'sm_90a'
ptxas info    : Function properties for _Z7matvec2Pf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers, used 0 barriers
"""


def self_test():
    import io

    cases = [
        # (kernel, threads, dynamic smem, expected exit code, a phrase the output must hold)
        ("interpreter_kernel", 896, 200000, 0, "ok _ZN2mk4cuda18interpreter_kernel"),
        ("_ZN2mk4cuda18interpreter_kernelEPKNS0_6ParamsE", 896, 200000, 0, "72 registers x 896"),
        ("interpreter_kernel", 1024, 0, 1, "72 registers x 1024 threads = 73728 (73728 as allocated per warp) > 65536"),
        ("interpreter_kernel", 896, 0, 0, "ok"),
        ("rounds", 768, 0, 1, "85 registers x 768 threads = 65280 (67584 as allocated per warp)"),
        ("rounds", 640, 0, 0, "ok"),
        ("interpreter_kernel", 256, 232448 - 384 + 1, 1, "= 232449 > 232448"),
        ("interpreter_kernel", 256, 232448 - 384, 0, "ok"),
        ("spiller", 128, 0, 1, "440 bytes spill stores, 484 bytes spill loads"),
        ("spiller", 128, 0, 1, "448 bytes stack frame"),
        ("legacy", 128, 0, 1, "16 bytes local memory (lmem)"),
        ("helper", 128, 0, 2, "no entry function matching 'helper'"),
        ("matvec", 128, 0, 2, "matches several functions"),
        ("each:matvec", 128, 0, 0, "ok _Z7matvec2Pf"),
        ("interpreter_kernel", 128, 0, 2, "for sm_100a"),
    ]
    failed = 0
    for i, (name, threads, smem, want_rc, phrase) in enumerate(cases):
        buf = io.StringIO()
        arch = "sm_100a" if "sm_100a" in phrase else None
        each = name.startswith("each:")
        rc = check(SELF_TEST_LOG, name.removeprefix("each:"), threads, smem, arch=arch, source="canned", out=buf,
                   each=each)
        if rc != want_rc or phrase not in buf.getvalue():
            failed += 1
            print(f"self-test case {i} ({name}, {threads}, {smem}): exit {rc}, want {want_rc}; "
                  f"want '{phrase}' in:\n{buf.getvalue()}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", help="an nvcc -Xptxas -v log ('-' for stdin)")
    ap.add_argument("--kernel", help="mangled name, or a piece of the demangled name")
    ap.add_argument("--threads", type=int, help="threads per block the kernel is launched with")
    ap.add_argument("--smem", type=int, default=0, help="dynamic shared memory bytes per block")
    ap.add_argument("--arch", help="only entries compiled for this target (e.g. sm_90a)")
    ap.add_argument("--each", action="store_true", help="NAME may match several functions: check every one")
    ap.add_argument("--self-test", action="store_true", help="check the parser on a canned log")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.log or not a.kernel or not a.threads or a.threads <= 0 or a.smem < 0:
        ap.error("LOG, --kernel and a positive --threads are required")
    try:
        text = sys.stdin.read() if a.log == "-" else open(a.log, encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"check-ptxas: error: {a.log}: {e.strerror}", file=sys.stderr)
        return 2
    return check(text, a.kernel, a.threads, a.smem, arch=a.arch, source=a.log, each=a.each)


if __name__ == "__main__":
    sys.exit(main())

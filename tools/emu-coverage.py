#!/usr/bin/env python3
"""Line coverage of the CUDA device sources as the emulator ran them: merges gcov's JSON for every
object of mk_cuda_emu (a build with -DMK_EMU_COVERAGE=ON, after running mk_cuda_emu_tests) and prints
covered / executable lines per device source. Usage: emu-coverage.py BUILD_DIR [SOURCE_ROOT]"""
import gzip
import json
import os
import subprocess
import sys
import tempfile


def main():
    build = os.path.abspath(sys.argv[1])
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), '..'))
    objects = os.path.join(build, 'runtime', 'emu', 'CMakeFiles', 'mk_cuda_emu.dir')
    gcdas = [os.path.join(d, f) for d, _, fs in os.walk(objects) for f in fs if f.endswith('.gcda')]
    if not gcdas:
        sys.exit(f'emu-coverage: no .gcda under {objects}: build with -DMK_EMU_COVERAGE=ON and run mk_cuda_emu_tests')
    lines = {}  # (file, line) -> count, summed over objects
    with tempfile.TemporaryDirectory() as out:
        for gcda in gcdas:  # one at a time: each object's .gcno sits beside its .gcda
            subprocess.run(['gcov', '--json-format', gcda], cwd=out, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            os.rename(os.path.join(out, os.path.basename(gcda)[:-5] + '.gcov.json.gz'),
                      os.path.join(out, str(gcdas.index(gcda)) + '.gcov.json.gz'))
        for name in os.listdir(out):
            if not name.endswith('.gcov.json.gz'):
                continue
            with gzip.open(os.path.join(out, name)) as f:
                data = json.load(f)
            for entry in data['files']:
                path = os.path.normpath(os.path.join(data.get('current_working_directory', build), entry['file']))
                for line in entry['lines']:
                    key = (path, line['line_number'])
                    lines[key] = lines.get(key, 0) + line['count']
    per_file = {}
    for (path, _), count in lines.items():
        rel = os.path.relpath(path, root)
        if rel.startswith('..') or not (rel.endswith('.cu') or rel.endswith('.cuh')):
            continue
        covered, total = per_file.get(rel, (0, 0))
        per_file[rel] = (covered + (count > 0), total + 1)
    for rel in sorted(per_file):
        covered, total = per_file[rel]
        print(f'{100.0 * covered / total:6.1f}%  {covered:4d} / {total:4d}  {rel}')


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""The user guides' quick starts run as written on what `make demo` leaves behind (build/ferry and
demo/): each guide's first ```sh block under "Quick start" runs with bash -e in a fresh folder
holding `build` and `demo` (issue 41).

usage: check_quick_starts.py FERRY REPO_ROOT WORKDIR"""
import os
import re
import shutil
import subprocess
import sys

FERRY, ROOT, WORK = sys.argv[1:4]
GUIDES = ["docs/training.md", "docs/quantization.md"]
failures = []
for guide in GUIDES:
    text = open(os.path.join(ROOT, guide), encoding="utf-8").read()
    m = re.search(r"^## Quick start[^\n]*\n(.*?)^```sh\n(.*?)^```", text, re.S | re.M)
    if not m:
        failures.append(f"{guide}: no '## Quick start' section with a ```sh block")
        continue
    block = m.group(2)
    lines = [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    if len(lines) > 14:
        failures.append(f"{guide}: the quick start has {len(lines)} lines (about ten wanted)")
    d = os.path.join(WORK, os.path.basename(guide).replace(".md", ""))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "build"))
    os.symlink(os.path.abspath(FERRY), os.path.join(d, "build", "ferry"))
    os.symlink(os.path.join(os.path.abspath(ROOT), "demo"), os.path.join(d, "demo"))
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=d, capture_output=True, text=True, timeout=240)
    print(f"== {guide}: exit {p.returncode}\n{p.stdout[-1500:]}")
    if p.returncode != 0:
        failures.append(f"{guide}: the quick start failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("ok")

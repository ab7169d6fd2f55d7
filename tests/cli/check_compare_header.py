#!/usr/bin/python3
"""`ferry compare`'s header names the precision each side really runs in: a .ferry compiled with
allow_mix_precision runs mixed even under a cpu:fp32 spec; an .onnx takes the spec's mode.

usage: check_compare_header.py FERRY MODEL.onnx INPUT.npy WORKDIR
"""
import json
import os
import subprocess
import sys

FERRY, MODEL, INPUT, WORK = sys.argv[1:5]
os.makedirs(WORK, exist_ok=True)
failures = []


def ferry(*args):
    r = subprocess.run([FERRY, *args], capture_output=True, text=True)
    # compare exits 2 when the target is over the thresholds (bf16 may be): only its text matters here
    if r.returncode != 0 and not (args[0] == "compare" and r.returncode == 2 and r.stdout):
        failures.append(f"ferry {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r


mix = os.path.join(WORK, "mix.ferry")
ferry("compile", MODEL, "-o", mix, "--precision-mode", "mix")
head = ferry("compare", mix, "--target", "cpu:fp32", "--input", INPUT).stdout.splitlines()[1:2]
if not head or head[0].count("allow_mix_precision (compiled into the .ferry file)") != 2:
    failures.append(f"mix-compiled file under cpu:fp32: header {head}")
j = json.loads(ferry("compare", mix, "--target", "cpu:fp16", "--input", INPUT, "--json").stdout or "{}")
if j.get("target_runs_in") != "force_fp16 over the .ferry file's compiled allow_mix_precision":
    failures.append(f"mix-compiled file under cpu:fp16: target_runs_in {j.get('target_runs_in')!r}")
head = ferry("compare", MODEL, "--target", "cpu:bf16", "--input", INPUT).stdout.splitlines()[1:2]
if not head or "[force_fp32]" not in head[0] or "[force_bf16]" not in head[0]:
    failures.append(f"onnx model under cpu:bf16: header {head}")
for f in failures:
    print("FAIL", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)

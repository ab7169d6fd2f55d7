#!/usr/bin/env python3
"""The CLI on a compiled model with batch gears (`ferry compile --dynamic-batch 1,2,4,8`): `ferry run`
at batches 1..8 equals the ONNX model at the same batch (bit for bit on a gear's batch; padded
batches to 1e-5), a batch above the largest gear exits 2 naming the gears, and bench, profile,
compare and info pick the gear for the batch they are given.

usage: check_gears_cli.py FERRY SOURCE_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

FERRY, SRC, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
model = os.path.join(SRC, "demo", "digits_cnn.onnx")
images = np.load(os.path.join(SRC, "demo", "samples", "digits_batch.npy")).astype(np.float32)
gears = os.path.join(WORK, "gears.ferry")
failures = []


def run(args, expect=0):
    p = subprocess.run([FERRY] + args, capture_output=True, text=True)
    if p.returncode != expect:
        failures.append(f"`ferry {' '.join(args)}`: exit {p.returncode} (expected {expect}): {p.stderr.strip()[-300:]}")
    return p


def batch_file(b):
    path = os.path.join(WORK, f"x{b}.npy")
    reps = -(-b // len(images))
    np.save(path, np.concatenate([images] * reps)[:b])
    return path


run(["compile", model, "-o", gears, "--dynamic-batch", "1,2,4,8"])
for b in range(1, 9):
    x = batch_file(b)
    run(["run", model, "--input", x, "-o", os.path.join(WORK, f"onnx_b{b}")])
    p = run(["run", gears, "--input", x, "-o", os.path.join(WORK, f"ferry_b{b}")])
    for name in os.listdir(os.path.join(WORK, f"onnx_b{b}")):
        want = np.load(os.path.join(WORK, f"onnx_b{b}", name))
        got_path = os.path.join(WORK, f"ferry_b{b}", name)
        if not os.path.exists(got_path):
            failures.append(f"batch {b}: {name} not written")
            continue
        got = np.load(got_path)
        if got.shape != want.shape:
            failures.append(f"batch {b}: {name} shape {got.shape}, ONNX gives {want.shape}")
        elif b in (1, 2, 4, 8) and not np.array_equal(got, want):
            failures.append(f"batch {b} (a gear): {name} differs from the ONNX run")
        elif np.max(np.abs(got - want)) > 1e-5:
            failures.append(f"batch {b} (padded): {name} max abs diff {np.max(np.abs(got - want))}")
    if b == 3 and "on the batch-4 gear" not in p.stdout:
        failures.append(f"batch 3: `ferry run` does not say which gear ran it: {p.stdout.strip()[:200]}")
    print(f"ok   batch {b}")

x9 = batch_file(9)
p = run(["run", gears, "--input", x9], expect=2)
if "batch 9 is not covered by the compiled batch sizes 1,2,4,8" not in p.stderr:
    failures.append(f"batch 9: message does not name the gears: {p.stderr.strip()[:300]}")
x3 = batch_file(3)
p = run(["bench", gears, "--batch", "3", "-n", "1", "-w", "0", "--json"])
if p.returncode == 0 and json.loads(p.stdout).get("batch") != 3:
    failures.append(f"bench --batch 3 reports batch {json.loads(p.stdout).get('batch')}")
run(["bench", gears, "--batch", "9", "-n", "1"], expect=2)
run(["bench", gears, "--input", x3, "-n", "1", "-w", "0", "-o", os.path.join(WORK, "bench_b3")])
if os.path.exists(os.path.join(WORK, "bench_b3")):
    for name in os.listdir(os.path.join(WORK, "bench_b3")):
        if np.load(os.path.join(WORK, "bench_b3", name)).shape[0] != 3:
            failures.append(f"bench at batch 3 wrote {name} with another batch")
run(["profile", gears, "--input", x3, "-n", "1"])
run(["compare", gears, "--ref", "cpu-ref:fp32", "--target", "cpu:fp32", "--input", x3])
p = run(["info", gears, "--batch", "3", "--json"])
if p.returncode == 0:
    info = json.loads(p.stdout)
    if info.get("batch_gears") != "1,2,4,8" or info["inputs"][0].get("shape", [None])[0] != 4:
        failures.append(f"info --batch 3: gears {info.get('batch_gears')}, input {info['inputs'][0]}")
run(["info", gears, "--batch", "9"], expect=2)

for f in failures:
    print("FAIL", f)
print(f"{'FAILED' if failures else 'passed'}: batch gears in the CLI ({len(failures)} failure(s))")
sys.exit(1 if failures else 0)

#!/usr/bin/python3
"""Input and output names that look like paths or specs (gpu_0/data_0, x=y, input:0): `--input NAME=FILE`
matches the model's input names first (the longest name followed by '=' wins), then falls back to a
path; output files get safe names and --json maps them to the real ones (run, bench, profile, compare).

usage: check_io_names.py FERRY WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

FERRY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def ferry(*args):
    return subprocess.run([FERRY, *args], capture_output=True, text=True)


vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
# 'x' and 'x=y' both exist: "x=y=FILE" must go to 'x=y' (longest), "x=FILE" to 'x'.
g = helper.make_graph([helper.make_node("Add", ["gpu_0/data_0", "x=y"], ["s"]),
                       helper.make_node("Mul", ["s", "input:0"], ["m"]),
                       helper.make_node("Sub", ["m", "x"], ["out/prob:0"]),
                       helper.make_node("Neg", ["x=y"], ["out/prob_0"])],
                      "names", [vi("gpu_0/data_0"), vi("x=y"), vi("input:0"), vi("x")],
                      [vi("out/prob:0"), vi("out/prob_0")])
model = os.path.join(WORK, "names.onnx")
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
rng = np.random.default_rng(3)
vals = {k: rng.standard_normal((2, 3)).astype(np.float32) for k in ("a", "b", "c", "d")}
for k, v in vals.items():
    np.save(os.path.join(WORK, k + ".npy"), v)
f = lambda k: os.path.join(WORK, k + ".npy")
specs = ["--input", "gpu_0/data_0=" + f("a"), "--input", "x=y=" + f("b"), "--input", "input:0=" + f("c"),
         "--input", "x=" + f("d")]
expect0 = (vals["a"] + vals["b"]) * vals["c"] - vals["d"]
expect1 = -vals["b"]

out = os.path.join(WORK, "run_out")
r = ferry("run", model, *specs, "--output-dir", out, "--json")
if check(r.returncode == 0, f"run: exit {r.returncode}: {r.stderr}"):
    j = json.loads(r.stdout)
    files = {e["name"]: e.get("file") for e in j["outputs"]}
    check(set(files) == {"out/prob:0", "out/prob_0"}, f"run --json output names: {sorted(files)}")
    for name, ref in (("out/prob:0", expect0), ("out/prob_0", expect1)):
        path = files.get(name) or ""
        check(os.path.dirname(path) == out and "/" not in os.path.basename(path) and ":" not in os.path.basename(path),
              f"run: output '{name}' file '{path}' is not a safe name in {out}")
        check(os.path.exists(path) and np.allclose(np.load(path), ref, atol=1e-6), f"run: output '{name}' is wrong")
    safe = j.get("output_files", {})
    check(sorted(safe.values()) == ["out/prob:0", "out/prob_0"] and
          all(os.path.join(out, k + ".npy") == files[v] for k, v in safe.items()), f"run --json output_files: {safe}")
    check("input 'x=y'" in r.stderr, f"run: no note saying which input 'x=y=...' went to: {r.stderr!r}")

for cmd in ("bench", "profile"):
    out = os.path.join(WORK, cmd + "_out")
    extra = ["--iterations", "2", "--warmup", "0"] if cmd == "bench" else []
    r = ferry(cmd, model, *specs, "--output-dir", out, "--json", *extra)
    if check(r.returncode == 0, f"{cmd}: exit {r.returncode}: {r.stderr}"):
        files = json.loads(r.stdout).get("output_files", {})
        check(sorted(files.values()) == ["out/prob:0", "out/prob_0"], f"{cmd} --json output_files: {files}")
        for safe, name in files.items():
            ref = expect0 if name == "out/prob:0" else expect1
            p = os.path.join(out, safe + ".npy")
            check(os.path.exists(p) and np.allclose(np.load(p), ref, atol=1e-6), f"{cmd}: {p} ({name}) is wrong")

r = ferry("compare", model, *specs, "--target", "cpu:fp32", "--json")
check(r.returncode == 0, f"compare: exit {r.returncode}: {r.stderr}")

# The fallback: a path whose folder holds '=' is still a path (positional input).
weird = os.path.join(WORK, "k=v")
os.makedirs(weird, exist_ok=True)
np.save(os.path.join(weird, "a.npy"), vals["a"])
r = ferry("run", model, "--input", os.path.join(weird, "a.npy"), "--input", "x=y=" + f("b"),
          "--input", "input:0=" + f("c"), "--input", "x=" + f("d"), "--json")
check(r.returncode == 0, f"run with a '=' in the input's folder: exit {r.returncode}: {r.stderr}")
# A name that is no input still says which inputs there are.
r = ferry("run", model, "--input", "nosuch=" + f("a"))
check(r.returncode == 2 and "gpu_0/data_0" in r.stderr, f"unknown input name: exit {r.returncode}: {r.stderr}")

for x in failures:
    print("FAIL", x)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)

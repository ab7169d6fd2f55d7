#!/usr/bin/env python3
"""Input-shape checks on zoo models.

    check_input_shapes.py FERRY ZOO_DIR

1. A static model (resnet50_op13, declared input f32[1,3,224,224]) fed
   1x3x256x256 must fail with exit 2 and a message that names the input and
   both shapes.
2. The same for a dynamic-batch model (resnet18_dynbatch_op13, input
   [batch,3,224,224]) fed a wrong spatial size: only the batch is free.
3. Dynamic-batch models run at batch sizes that were never exported or
   generated (5 and 12): the input is the concatenation of the generated cases'
   inputs, so the expected output is the concatenation of their references
   (checked with the fidelity criteria).
Exit 0 when all hold, 1 otherwise, 2 when the zoo cases are missing.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fidelity import compare  # noqa: E402


def shape_forms(shape):
    """Ways a message may write a shape."""
    return [
        "[" + ",".join(map(str, shape)) + "]",
        "[" + ", ".join(map(str, shape)) + "]",
        "x".join(map(str, shape)),
        "(" + ", ".join(map(str, shape)) + ")",
    ]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                       timeout=900)
    return p.returncode, p.stdout, p.stderr


def check_rejects(ferry, case_dir, bad_shape, declared, tmp, label):
    x = np.random.RandomState(0).randn(*bad_shape).astype(np.float32)
    path = os.path.join(tmp, f"bad_{label}.npy")
    np.save(path, x)
    rc, out, err = run([ferry, "run", os.path.join(case_dir, "model.onnx"), "--input", f"input={path}"])
    msg = (err + out).strip()
    problems = []
    if rc != 2:
        problems.append(f"exit {rc}, want 2")
    if "'input'" not in msg and '"input"' not in msg:
        problems.append("message does not name input 'input'")
    for shp, what in ((declared, "declared"), (bad_shape, "given")):
        if not any(f in msg for f in shape_forms(shp)):
            problems.append(f"message lacks the {what} shape {shp}")
    ok = not problems
    print(f"[{'PASS' if ok else 'FAIL'}] {label}: fed {list(bad_shape)} -> exit {rc}: {msg.splitlines()[-1] if msg else ''}"
          + ("" if ok else f"  ({'; '.join(problems)})"))
    return ok


def check_new_batch(ferry, zoo, prefix, parts, tmp):
    """parts: [(case, rows)] -> concatenated input/reference of that many rows each."""
    xs, ys = [], []
    for case, rows in parts:
        d = os.path.join(zoo, case)
        xs.append(np.load(os.path.join(d, "input_0.npy"))[:rows])
        ys.append(np.load(os.path.join(d, "expected_0.npy"))[:rows])
    x, y = np.concatenate(xs), np.concatenate(ys)
    b = x.shape[0]
    path = os.path.join(tmp, f"{prefix}_b{b}.npy")
    np.save(path, x)
    outdir = os.path.join(tmp, f"out_{prefix}_b{b}")
    model = os.path.join(zoo, parts[0][0], "model.onnx")
    rc, out, err = run([ferry, "run", model, "--input", f"input={path}", "--output-dir", outdir])
    if rc != 0:
        print(f"[FAIL] {prefix} at batch {b}: exit {rc}: {(err + out).strip().splitlines()[-1:]}")
        return False
    outs = sorted(f for f in os.listdir(outdir) if f.endswith(".npy"))
    got = np.load(os.path.join(outdir, outs[0]))
    r = compare(y, got)
    print(f"[{'PASS' if r['ok'] else 'FAIL'}] {prefix} at batch {b} (never exported): output {list(got.shape)} "
          f"cosine 1-{1 - r['cosine']:.1e} rel err {r['rel']:.2e} {r['note']}")
    return r["ok"]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ferry, zoo = sys.argv[1], sys.argv[2]
    need = ["resnet50_op13", "resnet18_dynbatch_op13_b1", "resnet18_dynbatch_op13_b3", "resnet18_dynbatch_op13_b8",
            "unet_dynbatch_op17_b1", "unet_dynbatch_op17_b3", "unet_dynbatch_op17_b8"]
    missing = [c for c in need if not os.path.isfile(os.path.join(zoo, c, "meta.json"))]
    if missing:
        print(f"missing zoo cases {missing}: run tests/zoo/gen_zoo.py --out {zoo}", file=sys.stderr)
        return 2
    ok = True
    with tempfile.TemporaryDirectory(prefix="ferry_zoo_shapes.") as tmp:
        ok &= check_rejects(ferry, os.path.join(zoo, "resnet50_op13"), (1, 3, 256, 256), (1, 3, 224, 224), tmp,
                            "static resnet50_op13")
        ok &= check_rejects_dyn(ferry, os.path.join(zoo, "resnet18_dynbatch_op13_b1"), tmp)
        ok &= check_new_batch(ferry, zoo, "resnet18_dynbatch_op13",
                              [("resnet18_dynbatch_op13_b1", 1), ("resnet18_dynbatch_op13_b3", 3),
                               ("resnet18_dynbatch_op13_b8", 1)], tmp)
        ok &= check_new_batch(ferry, zoo, "unet_dynbatch_op17",
                              [("unet_dynbatch_op17_b8", 8), ("unet_dynbatch_op17_b3", 3),
                               ("unet_dynbatch_op17_b1", 1)], tmp)
    print("RESULT: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def check_rejects_dyn(ferry, case_dir, tmp):
    """Dynamic batch, fixed spatial dims: 2x3x256x256 must be refused (exit 2) with
    a message naming the input, the given shape and the fixed dim."""
    bad = (2, 3, 256, 256)
    x = np.random.RandomState(1).randn(*bad).astype(np.float32)
    path = os.path.join(tmp, "bad_dyn.npy")
    np.save(path, x)
    rc, out, err = run([ferry, "run", os.path.join(case_dir, "model.onnx"), "--input", f"input={path}"])
    msg = (err + out).strip()
    problems = []
    if rc != 2:
        problems.append(f"exit {rc}, want 2")
    if "'input'" not in msg and '"input"' not in msg:
        problems.append("message does not name input 'input'")
    if not any(f in msg for f in shape_forms(bad)):
        problems.append(f"message lacks the given shape {list(bad)}")
    if "224" not in msg:
        problems.append("message lacks the declared size 224")
    ok = not problems
    print(f"[{'PASS' if ok else 'FAIL'}] dynamic-batch resnet18 fed {list(bad)} (spatial dims are fixed) -> "
          f"exit {rc}: {msg.splitlines()[-1] if msg else ''}" + ("" if ok else f"  ({'; '.join(problems)})"))
    return ok


if __name__ == "__main__":
    sys.exit(main())

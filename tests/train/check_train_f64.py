"""Float32 accuracy of `ferry train` against a float64 reference (issue 37): the models of
tests/train/train_models.py (the CNN with BatchNorm, the transformer block), batch 16, 12 steps
of SGD momentum, Adam and AdamW from the same initial weights and data, run in PyTorch float32,
PyTorch float64 and ferry (1 thread). The distance of a run to the float64 one is the worst, over
the trained tensors (parameters and BatchNorm running statistics), of max |a - b| / max |b|.
ferry must be within 2x PyTorch float32's distance (issue 37's bar). Deterministic: one thread on
both sides, fixed seeds. These models and data have no ReLU-sign or max-pool-argmax flip between
the float32 and float64 runs in their 12 steps, so the distances measure rounding (a flip would move
a distance by 10-1000x: docs/training.md, "How exact"). Computing Adam's bias corrections in float32
fails the four Adam/AdamW cases at 11-20x.

usage: check_train_f64.py FERRY WORKDIR [--cases cnn-adamw,...] [--factor F] [--seed S]
           [--x-offset A --x-scale B]   (inputs A + B * N(0, 1); the `deep-*` cases, a 3-block CNN,
           are for studying flips: docs/training.md)"""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_models as tm  # noqa: E402

torch.set_num_threads(1)
FERRY, WORK = sys.argv[1], sys.argv[2]


def option(name, default):
    return float(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


FACTOR, SEED = option("--factor", 2.0), int(option("--seed", 2))
X_OFFSET, X_SCALE = option("--x-offset", 0.0), option("--x-scale", 1.0)
os.makedirs(WORK, exist_ok=True)
BATCH, STEPS, N = 16, 12, 64
OPTS = {
    "sgd": dict(kind="sgd", lr=0.01, momentum=0.9),
    "adam": dict(kind="adam", lr=1e-3),
    "adamw": dict(kind="adamw", lr=1e-3, weight_decay=1e-2),
}
CASES = [f"{m}-{o}" for m in ("cnn", "block") for o in OPTS]
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def optimizer_flags(o):
    flags = ["--optimizer", o["kind"], "--lr", repr(o["lr"])]
    if o.get("momentum"):
        flags += ["--momentum", repr(o["momentum"])]
    if "weight_decay" in o:
        flags += ["--weight-decay", repr(o["weight_decay"])]
    return flags


def reference(kind, onnx_path, x, y, o, dtype):
    """PyTorch's loop in `dtype` from the exported initializers: the trained state dict in float64."""
    model, _, _ = tm.make(kind)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    sd = model.state_dict()
    for key in sd:
        if key in init:
            sd[key].copy_(torch.from_numpy(init[key].copy()))
    model = model.to(dtype)
    tm.train(model, x.astype(np.float64) if dtype == torch.float64 else x, y, BATCH, STEPS,
             tm.make_optimizer(model, **o))
    return {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def distance(got, want):
    worst, name = 0.0, ""
    for key, v in want.items():
        e = rel(got[key], v)
        if e > worst:
            worst, name = e, key
    return worst, name


def check_case(case):
    kind, opt = case.split("-")
    o = OPTS[opt]
    d = os.path.join(WORK, case)
    os.makedirs(d, exist_ok=True)
    model, shape, classes = tm.make(kind)
    onnx_path = os.path.join(d, "model.onnx")
    tm.export(model, shape, onnx_path)
    x, y = tm.data(shape, classes, N, seed=SEED)
    if (X_OFFSET, X_SCALE) != (0.0, 1.0):
        x = (X_OFFSET + X_SCALE * x).astype(np.float32)
    np.savez(os.path.join(d, "data.npz"), x=x, labels=y)
    f64 = reference(kind, onnx_path, x, y, o, torch.float64)
    f32 = reference(kind, onnx_path, x, y, o, torch.float32)
    out = os.path.join(d, "trained.onnx")
    p = subprocess.run([FERRY, "train", onnx_path, "--data", os.path.join(d, "data.npz"), "--batch-size", str(BATCH),
                        "--steps", str(STEPS), "--no-shuffle", "--threads", "1", "--out", out, "-q",
                        *optimizer_flags(o)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"{case}: ferry train exited {p.returncode}:\n{p.stderr[-2000:]}")
        return
    trained = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    missing = [k for k in f64 if k not in trained]
    if missing:
        fail(f"{case}: the trained model lacks {missing}")
        return
    dt, nt = distance(f32, f64)
    df, nf = distance(trained, f64)
    print(f"{case:12s} distance to float64: torch f32 {dt:.2e} ({nt}), ferry {df:.2e} ({nf}), ratio {df / dt:.2f}")
    if df > FACTOR * dt:
        fail(f"{case}: ferry's distance to the float64 run {df:.2e} ({nf}) is over {FACTOR:g}x PyTorch float32's "
             f"{dt:.2e} ({nt})")


selected = sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv else CASES
for c in selected:
    check_case(c)
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("float64 distance checks passed")

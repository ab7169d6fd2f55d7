"""`ferry train` against PyTorch's own training loop (tests/train/train_models.py): a small CNN
with BatchNorm and a small transformer block, 20 steps of SGD momentum and AdamW; losses and
final weights within 1e-4 relative; the trained model runs in `ferry run` and gives PyTorch's
eval outputs; a resumed run equals the uninterrupted one bit for bit.

usage: check_train.py FERRY WORKDIR [--cases cnn-sgd,...]"""
import json
import os
import shutil
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
os.makedirs(WORK, exist_ok=True)
BATCH, STEPS, N = 8, 20, 32
CASES = {
    "cnn-sgd": ("cnn", dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4)),
    "cnn-adamw": ("cnn", dict(kind="adamw", lr=0.01, weight_decay=0.01)),
    "block-sgd": ("block", dict(kind="sgd", lr=0.05, momentum=0.9, nesterov=True)),
    "block-adamw": ("block", dict(kind="adamw", lr=0.005, weight_decay=0.01)),
}
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def ferry(*args, expect=0):
    p = subprocess.run([FERRY, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != expect:
        fail(f"ferry {' '.join(args)} exited {p.returncode} (expected {expect}):\n{p.stderr[-2000:]}")
    return p


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def optimizer_flags(o):
    flags = ["--optimizer", o["kind"], "--lr", str(o["lr"])]
    if o.get("momentum"):
        flags += ["--momentum", str(o["momentum"])]
    if o.get("nesterov"):
        flags += ["--nesterov"]
    if "weight_decay" in o:
        flags += ["--weight-decay", str(o["weight_decay"])]
    return flags


def setup(name, kind):
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    model, shape, classes = tm.make(kind)
    onnx_path = os.path.join(d, "model.onnx")
    tm.export(model, shape, onnx_path)
    x, y = tm.data(shape, classes, N, seed=1)
    np.savez(os.path.join(d, "data.npz"), x=x, labels=y)
    return d, onnx_path, x, y, shape, classes


def load_initial(model, onnx_path):
    """The reference starts from the exported initializers (tracing a train() model for export runs
    it once, which moves BatchNorm's running statistics)."""
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    sd = model.state_dict()
    for key in sd:
        if key in init:
            sd[key].copy_(torch.from_numpy(init[key].copy()))


def check_case(name, kind, o):
    d, onnx_path, x, y, shape, classes = setup(name, kind)
    model, _, _ = tm.make(kind)
    load_initial(model, onnx_path)
    ref_losses = tm.train(model, x, y, BATCH, STEPS, tm.make_optimizer(model, **o))
    log = os.path.join(d, "log.jsonl")
    out = os.path.join(d, "trained.onnx")
    before = len(failures)
    ferry("train", onnx_path, "--data", os.path.join(d, "data.npz"), "--batch-size", str(BATCH), "--steps", str(STEPS),
          "--no-shuffle", "--threads", "2", "--log", log, "--out", out, "-q", *optimizer_flags(o))
    if len(failures) > before:
        return
    steps = [r for r in read_log(log) if "loss" in r]
    losses = [r["loss"] for r in steps]
    if [r["step"] for r in steps] != list(range(1, STEPS + 1)):
        fail(f"{name}: log steps are {[r['step'] for r in steps]}")
    for key in ("epoch", "lr", "time_ms", "samples_per_s", "data_wait_ms", "compute_ms", "update_ms", "elapsed_ms"):
        if any(key not in r for r in steps):
            fail(f"{name}: a log line lacks '{key}'")
    if any(not 0 <= r["compute_ms"] + r["update_ms"] <= r["time_ms"] for r in steps):
        fail(f"{name}: compute_ms + update_ms exceed the step's time_ms: {steps}")
    # elapsed_ms: since the process started, at each step's end: past all the steps' own times so far
    if any(r["elapsed_ms"] < sum(q["time_ms"] for q in steps[:i + 1]) for i, r in enumerate(steps)):
        fail(f"{name}: elapsed_ms is below the sum of the steps' time_ms: {steps}")
    err = rel(losses, ref_losses)
    print(f"{name}: losses max rel diff {err:.2e} (first {losses[0]:.6f} / {ref_losses[0]:.6f}, "
          f"last {losses[-1]:.6f} / {ref_losses[-1]:.6f})")
    if err > 1e-4:
        fail(f"{name}: losses differ from PyTorch by {err:.2e} relative\n ferry {losses}\n torch {ref_losses}")
    trained = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    worst, worst_name = 0.0, ""
    for key, v in model.state_dict().items():
        if key.endswith("num_batches_tracked"):
            continue
        if key not in trained:
            fail(f"{name}: trained model lacks '{key}'")
            continue
        e = rel(trained[key], v.detach().numpy())
        if e > worst:
            worst, worst_name = e, key
    print(f"{name}: final weights max rel diff {worst:.2e} ({worst_name})")
    if worst > 1e-4:
        fail(f"{name}: final weight '{worst_name}' differs from PyTorch by {worst:.2e} relative")
    # The trained model is an inference model: ferry run gives PyTorch's eval outputs.
    m = onnx.load(out)
    if any(n.op_type == "Dropout" for n in m.graph.node) or any(
            n.op_type == "BatchNormalization" and len(n.output) != 1 for n in m.graph.node):
        fail(f"{name}: trained model keeps training-mode nodes")
    np.save(os.path.join(d, "x0.npy"), x[:2])
    ferry("run", out, "--input", os.path.join(d, "x0.npy"), "--output-dir", os.path.join(d, "run"), "--threads", "2")
    got = np.load(os.path.join(d, "run", "logits.npy"))
    model.eval()
    with torch.no_grad():
        want = model(torch.from_numpy(x[:2])).numpy()
    e = rel(got, want)
    print(f"{name}: ferry run of the trained model vs PyTorch eval: {e:.2e}")
    if e > 1e-4:
        fail(f"{name}: ferry run of the trained model differs from PyTorch eval by {e:.2e}")


def check_resume():
    d, onnx_path, *_ = setup("resume", "cnn")
    shutil.rmtree(os.path.join(d, "ck"), ignore_errors=True)
    common = ["--data", os.path.join(d, "data.npz"), "--batch-size", "4", "--threads", "2", "-q",
              "--optimizer", "adam", "--lr", "0.01", "--seed", "3"]
    ferry("train", onnx_path, *common, "--steps", "12", "--log", os.path.join(d, "full.jsonl"))
    ck = os.path.join(d, "ck")
    ferry("train", onnx_path, *common, "--steps", "12", "--log", os.path.join(d, "part.jsonl"), "--checkpoint-dir", ck,
          "--save-every", "5", "--keep-checkpoints", "2")
    kept = sorted(os.listdir(ck))
    if len(kept) != 2:
        fail(f"resume: --keep-checkpoints 2 kept {kept}")
    os.remove(os.path.join(ck, kept[-1]))  # the step-12 checkpoint: resume from step 10
    ferry("train", onnx_path, *common, "--steps", "12", "--log", os.path.join(d, "resumed.jsonl"), "--resume", ck)
    full = [r["loss"] for r in read_log(os.path.join(d, "full.jsonl")) if "loss" in r]
    resumed = [(r["step"], r["loss"]) for r in read_log(os.path.join(d, "resumed.jsonl")) if "loss" in r]
    kept_lines = [r["step"] for r in read_log(os.path.join(d, "part.jsonl")) if "loss" in r]
    if kept_lines != list(range(1, 13)):
        fail(f"resume: the first run's log has steps {kept_lines}")
    if [s for s, _ in resumed] != [11, 12] or [l for _, l in resumed] != full[10:12]:
        fail(f"resume: resumed steps/losses {resumed} != uninterrupted {full[10:12]}")
    else:
        print("resume: steps 11-12 after resuming from step 10 equal the uninterrupted run bit for bit")


selected = sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv else list(CASES) + ["resume"]
for case in selected:
    if case == "resume":
        check_resume()
    else:
        check_case(case, *CASES[case])
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all training checks passed")

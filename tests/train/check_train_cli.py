"""`ferry train` end to end beyond PyTorch parity: an ImageFolder of generated JPEG/PNG images
learns a colour task (with --eval, --num-classes and --out), eval-mode exports train, `ferry
check --train` names ops without gradients, and every bad input exits 2 naming the problem with
nothing lost (label out of range, missing arrays, NaN loss, op without gradient, corrupt and
huge images, a full disk while checkpointing, a checkpoint of another run).

usage: check_train_cli.py FERRY WORKDIR"""
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import zlib

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

FERRY, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def ferry(*args, expect=0, must=(), preexec=None):
    p = subprocess.run([FERRY, *args], capture_output=True, text=True, timeout=600, preexec_fn=preexec)
    if p.returncode != expect:
        fail(f"ferry {' '.join(args)} exited {p.returncode} (expected {expect}):\n{p.stdout[-800:]}{p.stderr[-1500:]}")
    for m in must:
        if m not in p.stderr:
            fail(f"ferry {' '.join(args)}: stderr lacks {m!r}:\n{p.stderr[-1500:]}")
    return p


def log_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Tiny(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1).flatten(1)
        return self.fc(self.drop(x))


def export(path, train=True, size=32):
    torch.manual_seed(0)
    m = Tiny()
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
    (m.train() if train else m.eval())
    torch.onnx.export(m, torch.zeros(2, 3, size, size), path, input_names=["x"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, training=mode, do_constant_folding=False)


def image_folder(root, per_class=12, size=40, seed=0):
    rng = np.random.default_rng(seed)
    for c, name in enumerate(["blue", "red"]):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            px = rng.integers(0, 90, (size, size, 3)).astype(np.uint8)
            px[..., 2 if c == 0 else 0] += 150
            img = Image.fromarray(px)
            if i % 4 == 1:
                img = img.convert("P", palette=Image.ADAPTIVE)  # palette PNG
            elif i % 4 == 3:
                img = img.convert("RGBA")                       # alpha dropped
            if i % 2 == 0:
                img.save(os.path.join(root, name, f"img{i:02d}.jpg"), quality=95)
            else:
                img.save(os.path.join(root, name, f"img{i:02d}.png"))


# --- an ImageFolder learns the colour task; eval, --num-classes, --out ----------------------
model = os.path.join(WORK, "tiny.onnx")
export(model)
folder = os.path.join(WORK, "images")
image_folder(folder)
log = os.path.join(WORK, "img.jsonl")
out = os.path.join(WORK, "tiny_trained.onnx")
ferry("train", model, "--data", folder, "--eval", folder, "--image-size", "32", "--batch-size", "8", "--epochs", "8",
      "--optimizer", "adam", "--lr", "0.05", "--num-classes", "2", "--seed", "1", "--threads", "2", "--log", log,
      "--out", out, "-q")
if os.path.exists(log):
    evals = [r for r in log_lines(log) if "eval_accuracy" in r]
    steps = [r for r in log_lines(log) if "loss" in r]
    print(f"imagefolder: {len(steps)} steps, eval accuracy per epoch {[round(r['eval_accuracy'], 3) for r in evals]}")
    if len(evals) != 8:
        fail(f"imagefolder: expected 8 evaluations (one per epoch), got {len(evals)}")
    elif evals[-1]["eval_accuracy"] < 0.9:
        fail(f"imagefolder: final eval accuracy {evals[-1]['eval_accuracy']} < 0.9")
    if any("data_wait_ms" not in r for r in steps):
        fail("imagefolder: step lines lack data_wait_ms")
if os.path.exists(out):
    w = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    if w["fc.weight"].shape != (2, 8):
        fail(f"--num-classes 2: fc.weight is {w['fc.weight'].shape}")
    np.save(os.path.join(WORK, "x.npy"), np.zeros((3, 3, 32, 32), np.float32))
    ferry("run", out, "--input", os.path.join(WORK, "x.npy"), "--output-dir", os.path.join(WORK, "run"))
    y = np.load(os.path.join(WORK, "run", "logits.npy"))
    if y.shape != (3, 2):
        fail(f"trained model output is {y.shape}, expected (3, 2)")
    # ... and compiles: the compiled model gives the same logits.
    ferry("compile", out, "-o", os.path.join(WORK, "tiny_trained.ferry"), "--input-shape", "x:3,3,32,32")
    ferry("run", os.path.join(WORK, "tiny_trained.ferry"), "--input", os.path.join(WORK, "x.npy"), "--output-dir",
          os.path.join(WORK, "run_compiled"))
    if os.path.exists(os.path.join(WORK, "run_compiled", "logits.npy")):
        yc = np.load(os.path.join(WORK, "run_compiled", "logits.npy"))
        if np.max(np.abs(yc - y)) > 1e-5:
            fail(f"compiled trained model differs from the ONNX one by {np.max(np.abs(yc - y))}")

# --- an eval-mode model that keeps BatchNormalization and Dropout trains too -----------------
# (torch's eval export folds them away, so the training-mode export is turned into eval form.)
em = onnx.load(model)
for n in em.graph.node:
    if n.op_type == "BatchNormalization":
        del n.output[1:]
        for a in list(n.attribute):
            if a.name == "training_mode":
                n.attribute.remove(a)
    if n.op_type == "Dropout" and len(n.input) > 2:
        em.graph.initializer.append(onnx.numpy_helper.from_array(np.array(False), "eval_false"))
        n.input[2] = "eval_false"
eval_model = os.path.join(WORK, "tiny_eval.onnx")
onnx.save(em, eval_model)
ferry("train", eval_model, "--data", folder, "--image-size", "32", "--batch-size", "4", "--steps", "3", "--optimizer", "sgd",
      "--lr", "0.1", "--num-classes", "2", "-q")

# --- .npz errors ---------------------------------------------------------------------------
x = np.random.default_rng(0).standard_normal((16, 3, 32, 32)).astype(np.float32)
y = np.arange(16) % 5
bad = y.copy()
bad[5] = 7
np.savez(os.path.join(WORK, "bad_label.npz"), x=x, labels=bad)
ferry("train", model, "--data", os.path.join(WORK, "bad_label.npz"), "--batch-size", "4", "--steps", "2", "--lr", "0.1",
      expect=2, must=("row 5", "label 7"))
np.savez(os.path.join(WORK, "no_labels.npz"), x=x)
ferry("train", model, "--data", os.path.join(WORK, "no_labels.npz"), "--batch-size", "4", "--steps", "2", "--lr", "0.1",
      expect=2, must=("labels",))
np.savez(os.path.join(WORK, "no_x.npz"), image=x, labels=y)
ferry("train", model, "--data", os.path.join(WORK, "no_x.npz"), "--batch-size", "4", "--steps", "2", "--lr", "0.1",
      expect=2, must=("'x'",))

# --- a NaN loss stops at its step; the last good checkpoint stays and resumes ---------------
xn = x.copy()
xn[9] = np.nan
np.savez(os.path.join(WORK, "nan.npz"), x=xn, labels=y)
ck = os.path.join(WORK, "nan_ck")
ferry("train", model, "--data", os.path.join(WORK, "nan.npz"), "--batch-size", "4", "--steps", "6", "--no-shuffle",
      "--lr", "0.1", "--checkpoint-dir", ck, "--save-every", "1", "-q", expect=2, must=("step 3", "NaN"))
if os.path.isdir(ck) and sorted(os.listdir(ck))[-1:] != ["ckpt-00000002.fckpt"]:
    fail(f"NaN loss: checkpoints left {sorted(os.listdir(ck))}, expected the last at step 2")

# --- an op without a gradient is named before any step --------------------------------------
W = onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
g = oh.make_graph([oh.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                   oh.make_node("CumSum", ["h", "axis"], ["logits"], name="cumsum_node")], "nograd",
                  [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", 4])],
                  [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["b", 3])],
                  [W, onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")])
nograd = os.path.join(WORK, "nograd.onnx")
onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), nograd)
np.savez(os.path.join(WORK, "vec.npz"), x=np.ones((8, 4), np.float32), labels=np.zeros(8, np.int64))
ferry("train", nograd, "--data", os.path.join(WORK, "vec.npz"), "--batch-size", "4", "--steps", "1", "--lr", "0.1",
      "--log", os.path.join(WORK, "nograd.jsonl"), expect=2, must=("cumsum_node", "CumSum"))
if os.path.exists(os.path.join(WORK, "nograd.jsonl")) and log_lines(os.path.join(WORK, "nograd.jsonl")):
    fail("op without gradient: a step ran before the error")
p = ferry("check", nograd, "--train", expect=2)
if "cumsum_node" not in p.stdout + p.stderr:
    fail(f"check --train does not name the node:\n{p.stdout}{p.stderr}")
ferry("check", model, "--train")

# --- corrupt and huge images -------------------------------------------------------------------
badf = os.path.join(WORK, "bad_images")
image_folder(badf, per_class=4)
with open(os.path.join(badf, "red", "img00.jpg"), "rb") as f:
    data = f.read()
with open(os.path.join(badf, "red", "cut.jpg"), "wb") as f:
    f.write(data[: len(data) // 2])
ferry("train", model, "--data", badf, "--image-size", "32", "--batch-size", "4", "--steps", "4", "--lr", "0.1",
      "--num-classes", "2", "-q", expect=2, must=("cut.jpg",))
p = ferry("train", model, "--data", badf, "--image-size", "32", "--batch-size", "4", "--steps", "4", "--lr", "0.1",
          "--num-classes", "2", "--skip-bad-images", "-q")
if "cut.jpg" not in p.stderr:
    fail(f"--skip-bad-images does not report the skipped file:\n{p.stderr}")
bomb = os.path.join(WORK, "bomb")
image_folder(bomb, per_class=1)
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
with open(os.path.join(bomb, "red", "huge.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b""))
ferry("train", model, "--data", bomb, "--image-size", "32", "--batch-size", "3", "--steps", "1", "--lr", "0.1",
      "--num-classes", "2", "-q", expect=2, must=("huge.png",))

# --- a full disk while checkpointing leaves the previous checkpoint intact ---------------------
ck = os.path.join(WORK, "disk_ck")
np.savez(os.path.join(WORK, "ok.npz"), x=x, labels=y)
common = ["--data", os.path.join(WORK, "ok.npz"), "--batch-size", "4", "--lr", "0.1", "--checkpoint-dir", ck, "-q"]
ferry("train", model, *common, "--steps", "2", "--save-every", "2")
size = os.path.getsize(os.path.join(ck, "ckpt-00000002.fckpt"))


def small_disk():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))


ferry("train", model, *common, "--steps", "4", "--save-every", "2", "--resume", ck, expect=2, preexec=small_disk)
left = sorted(os.listdir(ck))
if left != ["ckpt-00000002.fckpt"]:
    fail(f"full disk: the checkpoint folder holds {left}, expected only the previous checkpoint")
ferry("train", model, *common, "--steps", "4", "--save-every", "2", "--resume", ck)  # it still resumes

# --- a checkpoint of another run is refused -------------------------------------------------
ferry("train", model, *common[:-1], "--steps", "6", "--save-every", "2", "--resume", ck, "--seed", "9", "-q",
      expect=2, must=("different run",))
ferry("train", model, *common, "--steps", "2", "--freeze", "([", expect=2, must=("--freeze",))

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all ferry train CLI checks passed")

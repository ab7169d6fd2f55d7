#!/usr/bin/env python3
"""From an image folder to a photo classified by name (issue 41): `ferry train --out` writes the
class names and the eval transform into the model, `ferry run MODEL --input photo.jpg` applies the
same transform as torchvision's eval pipeline (checked against torchvision itself) and `--top-k`
prints names; training's messages (what it is about to do, the final line with the checkpoint
folder and the eval accuracy, a refused checkpoint naming the setting that differs, Ctrl-C saying
how to resume), `--plan-memory` exiting 2 when the plan does not fit.

usage: check_image_journey.py FERRY WORKDIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
from PIL import Image
from torchvision import transforms

FERRY, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failures = []


def expect(cond, what, detail=""):
    if not cond:
        failures.append(what + (("\n" + detail[-3000:]) if detail else ""))


def ferry(*args, timeout=120):
    return subprocess.run([FERRY, *map(str, args)], capture_output=True, text=True, timeout=timeout)


# A tiny classifier over 3x32x32 images, exported as a user would.
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                          torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval()
model = os.path.join(WORK, "net.onnx")
torch.onnx.export(net, torch.zeros(1, 3, 32, 32), model, input_names=["image"], output_names=["logits"],
                  dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=17)

# An ImageFolder: three classes, JPEG and PNG of odd sizes.
rng = np.random.default_rng(0)
data = os.path.join(WORK, "photos")
classes = ["bird", "cat", "dog"]
for ci, name in enumerate(classes):
    os.makedirs(os.path.join(data, name))
    for k in range(3):
        px = rng.integers(0, 256, size=(30 + 7 * k, 41 + 5 * ci, 3), dtype=np.uint8)
        px[..., ci] = 255  # a colour per class: learnable
        ext = "jpg" if k % 2 == 0 else "png"
        Image.fromarray(px).save(os.path.join(data, name, f"{k}.{ext}"))

trained = os.path.join(WORK, "trained.onnx")
ck = os.path.join(WORK, "ck")
common = [model, "--data", data, "--image-size", 32, "--batch-size", 3, "--optimizer", "adam", "--lr", 0.05,
          "--threads", 1, "--data-workers", 0]
p = ferry("train", *common, "--steps", 6, "--eval", data, "--out", trained, "--checkpoint-dir", ck, "--save-every", 3)
expect(p.returncode == 0, "ferry train on an image folder failed", p.stdout + p.stderr)
# Up front: images, classes with names, steps, batch, device, optimizer and lr.
expect("9 images (32x32), 3 classes (bird, cat, dog)" in p.stderr, "no up-front summary of the data", p.stderr)
expect("6 steps of batch 3 on cpu; adam lr 0.05; checkpoints in " + ck in p.stderr, "no up-front summary of the run", p.stderr)
# The final line: checkpoint folder and the last eval accuracy.
expect(f"; wrote {trained}; checkpoints in {ck}" in p.stdout and "eval accuracy " in p.stdout,
       "the final line lacks the checkpoint folder or the eval accuracy", p.stdout)

# The model carries the class names and the transform.
meta = {kv.key: kv.value for kv in onnx.load(trained).metadata_props}
expect(json.loads(meta.get("ferry.class_names", "null")) == classes, "class names not in the model's metadata", str(meta))
tf = json.loads(meta.get("ferry.image_transform", "{}"))
expect(tf.get("center_crop") == 32 and tf.get("resize") == 37, "eval transform not in the metadata", str(meta))

# `ferry run` on a photo = torchvision's eval pipeline, then the model.
photo = os.path.join(WORK, "photo.jpg")
Image.fromarray(rng.integers(0, 256, size=(50, 70, 3), dtype=np.uint8)).save(photo)
pipeline = transforms.Compose([transforms.Resize(37), transforms.CenterCrop(32), transforms.ToTensor(),
                               transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
x = pipeline(Image.open(photo).convert("RGB")).unsqueeze(0).numpy()
xnpy = os.path.join(WORK, "photo.npy")
np.save(xnpy, x)
out_img, out_npy = os.path.join(WORK, "o_img"), os.path.join(WORK, "o_npy")
p = ferry("run", trained, "--input", photo, "--top-k", 2, "--output-dir", out_img)
expect(p.returncode == 0, "ferry run --input photo.jpg failed", p.stdout + p.stderr)
expect(any(f" {c} [" in p.stdout for c in classes), "--top-k does not print class names", p.stdout)
p2 = ferry("run", trained, "--input", xnpy, "--output-dir", out_npy)
expect(p2.returncode == 0, "ferry run on torchvision's tensor failed", p2.stderr)
if p.returncode == 0 and p2.returncode == 0:
    a, b = np.load(os.path.join(out_img, "logits.npy")), np.load(os.path.join(out_npy, "logits.npy"))
    expect(np.allclose(a, b, atol=1e-4), f"photo.jpg vs torchvision's eval transform: max diff {np.abs(a - b).max()}")
p = ferry("run", trained, "--input", photo, "--top-k", 1, "--json")
expect(p.returncode == 0 and json.loads(p.stdout)["outputs"][0]["top_k"][0][0].get("label") in classes,
       "--json top_k has no label", p.stdout)
# Without metadata: the square input size; a model that does not say needs --image-size.
p = ferry("run", model, "--input", photo)
expect(p.returncode == 0, "ferry run --input photo.jpg on a fixed-size model", p.stderr)
p = ferry("run", trained, "--input", os.path.join(WORK, "missing.jpg"))
expect(p.returncode == 2 and "missing.jpg" in p.stderr, "a missing image is not named", p.stderr)
p = ferry("run", trained)
expect(p.returncode == 2 and "give the model's inputs with --input" in p.stderr and "'image' not given" in p.stderr,
       "forgetting --input does not say so", p.stderr)

# A refused checkpoint names the setting that differs.
p = ferry("train", *common, "--steps", 9, "--resume", ck, "--seed", 7)
expect(p.returncode == 2 and "seed 0 in the checkpoint, 7 now" in p.stderr, "the differing setting is not named", p.stderr)
# Resuming says so up front.
p = ferry("train", *common, "--steps", 7, "--resume", ck, "-q")
expect(p.returncode == 0, "resume failed", p.stderr)
p = ferry("train", *common, "--steps", 7, "--resume", ck)
expect(p.returncode == 0 and "resumed at step" in p.stderr.split("\n")[2], "resume is not reported up front", p.stderr)

# Ctrl-C says how to resume.
proc = subprocess.Popen([FERRY, "train", *map(str, common), "--steps", "1000000", "--checkpoint-dir", os.path.join(WORK, "ck2"),
                         "--save-every", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 60
seen = ""
while time.time() < deadline and "steps of batch" not in seen:
    line = proc.stderr.readline()
    if not line:
        break
    seen += line
time.sleep(1.0)
proc.send_signal(signal.SIGINT)
try:
    _, err = proc.communicate(timeout=30)
except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
expect(proc.returncode == 130 and "interrupted after step" in err and "--resume " + os.path.join(WORK, "ck2") in err,
       f"Ctrl-C does not say how to resume (exit {proc.returncode})", seen + err)

# `ferry info` describes a training-mode export (the file `ferry train` takes) instead of refusing it.
bn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train()
train_mode = os.path.join(WORK, "train_mode.onnx")
torch.onnx.export(bn, torch.zeros(2, 3, 8, 8), train_mode, input_names=["x"], opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
p = ferry("info", train_mode)
expect(p.returncode == 0 and "BatchNormalization" in p.stdout and "ferry train" in p.stdout,
       f"ferry info on a training-mode export: exit {p.returncode}", p.stdout + p.stderr)

# --plan-memory: exit 2 when the plan does not fit; the advice fits the case.
p = ferry("train", *common, "--steps", 1, "--plan-memory", "--memory-limit", "1M")
expect(p.returncode == 2 and "does NOT fit" in p.stdout, f"--plan-memory on a plan that does not fit: exit {p.returncode}",
       p.stdout + p.stderr)
p = ferry("train", *common, "--steps", 1, "--memory-limit", "1M")
expect(p.returncode == 2 and "not even batch 1 fits" in p.stderr and "--freeze" in p.stderr,
       "the refusal suggests batch-size remedies when not even batch 1 fits", p.stderr)

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("ok")

#!/usr/bin/python3
"""Train ferry's bundled demo model: a small CNN on scikit-learn's 8x8 digits.

Run with Debian's python (it has torch 1.13 / torchvision 0.14 / sklearn / onnx):

    /usr/bin/python3 demo/train_digits.py

Outputs (paths relative to this file's folder, demo/):
    digits_cnn.onnx                        the model, ONNX opset 13
    samples/digits_batch.npy               8 test images, float32 [8,1,28,28]
    samples/labels.txt                     their true labels, one per line
    samples/digit_<i>_label<L>.npy         each image alone, float32 [1,1,28,28]
    samples/digits_batch_logits_torch.npy  PyTorch's logits for the batch, float32 [8,10]

Preprocessing (what a caller must do to a raw 8x8 digit, values 0..16):
    1. x = pixels / 16.0                              -> [0, 1]
    2. bilinear upscale 8x8 -> 28x28 with
       torch.nn.functional.interpolate(mode="bilinear", align_corners=False),
       then clamp to [0, 1]
    3. x = (x - MEAN) / STD with the fixed constants below
       MEAN = 0.3053, STD = 0.3247 (measured once on all 1797 upscaled images
       and frozen here, so the preprocessing never depends on the split).
The sample .npy files are already preprocessed: feed them to the model as-is.

Model I/O: input "image" float32 [batch,1,28,28], output "logits" float32
[batch,10] (raw scores, no softmax); the batch axis is dynamic ("batch").

Determinism: fixed seeds (python, numpy, torch), torch.use_deterministic_algorithms,
2 intra-op threads, a fixed 80/20 stratified split (random_state=0) and a
seeded shuffling generator, so reruns give the same weights and the same file.
"""

import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
MEAN = 0.3053
STD = 0.3247
EPOCHS = 30
BATCH = 64
LR = 3e-3
OPSET = 13
# Classes of the 8 sample images, in order (first test image of each class).
SAMPLE_CLASSES = [3, 7, 0, 9, 1, 5, 8, 2]

HERE = os.path.dirname(os.path.abspath(__file__))
ONNX_PATH = os.path.join(HERE, "digits_cnn.onnx")
SAMPLES = os.path.join(HERE, "samples")


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)


def preprocess(images_8x8):
    """uint-ish [N,8,8] in 0..16 -> float32 tensor [N,1,28,28], standardised."""
    x = torch.tensor(np.asarray(images_8x8), dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    x = x.clamp(0.0, 1.0)
    return ((x - MEAN) / STD).contiguous()


class ResBlock(nn.Module):
    """conv-bn-relu-conv-bn, identity shortcut, Add, then BatchNorm + ReLU.

    The BatchNorm after the Add cannot be folded into a Conv at export, so the
    ONNX graph keeps a real BatchNormalization node (the ones right after a Conv
    are folded into the Conv weights by do_constant_folding / eval export).
    """

    def __init__(self, ch):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)
        self.bn_out = nn.BatchNorm2d(ch)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(self.bn_out(x + y))


class DigitsCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),            # 28 -> 14
        )
        self.block = ResBlock(16)
        self.down = nn.Sequential(
            nn.Conv2d(16, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.Hardswish(),
            nn.MaxPool2d(2),            # 14 -> 7
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),    # exported as GlobalAveragePool
            nn.Flatten(),
            nn.Linear(32, 64),
            nn.ReLU(),
            nn.Dropout(0.2),            # identity in eval mode / in ONNX
            nn.Linear(64, num_classes),
        )

    def forward(self, x):
        return self.head(self.down(self.block(self.stem(x))))


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    return (logits.argmax(1) == y).float().mean().item(), logits


def main():
    t0 = time.time()
    seed_everything(SEED)

    digits = load_digits()
    idx = np.arange(len(digits.target))
    tr_idx, te_idx = train_test_split(
        idx, test_size=0.2, random_state=SEED, stratify=digits.target)
    x_all = preprocess(digits.images)
    y_all = torch.tensor(digits.target, dtype=torch.long)
    x_tr, y_tr = x_all[tr_idx], y_all[tr_idx]
    x_te, y_te = x_all[te_idx], y_all[te_idx]
    print(f"train {len(tr_idx)} / test {len(te_idx)} images, input {tuple(x_tr.shape[1:])}")

    model = DigitsCNN()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters ({n_params * 4 / 1024:.1f} KiB float32)")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    steps_per_epoch = (len(tr_idx) + BATCH - 1) // BATCH
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=LR, total_steps=EPOCHS * steps_per_epoch)
    gen = torch.Generator().manual_seed(SEED)

    for epoch in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(tr_idx), generator=gen)
        total = 0.0
        for s in range(0, len(perm), BATCH):
            b = perm[s:s + BATCH]
            xb = x_tr[b]
            # light augmentation: random shift by up to 2 px (deterministic via gen)
            dx, dy = torch.randint(-2, 3, (2,), generator=gen).tolist()
            xb = torch.roll(xb, shifts=(dy, dx), dims=(2, 3))
            loss = F.cross_entropy(model(xb), y_tr[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(b)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            acc, _ = evaluate(model, x_te, y_te)
            print(f"epoch {epoch + 1:2d}  loss {total / len(tr_idx):.4f}  test acc {acc:.4f}")
    train_s = time.time() - t0

    model.eval()
    test_acc, _ = evaluate(model, x_te, y_te)

    # ---- samples: first test image of each class in SAMPLE_CLASSES ----
    y_te_np = y_te.numpy()
    pick = [int(np.flatnonzero(y_te_np == c)[0]) for c in SAMPLE_CLASSES]
    batch = x_te[pick].numpy().astype(np.float32)
    labels = y_te_np[pick]
    os.makedirs(SAMPLES, exist_ok=True)
    np.save(os.path.join(SAMPLES, "digits_batch.npy"), batch)
    with open(os.path.join(SAMPLES, "labels.txt"), "w") as f:
        f.write("".join(f"{int(l)}\n" for l in labels))
    for i, l in enumerate(labels):
        np.save(os.path.join(SAMPLES, f"digit_{i}_label{int(l)}.npy"), batch[i:i + 1])
    with torch.no_grad():
        logits = model(torch.from_numpy(batch)).numpy().astype(np.float32)
    np.save(os.path.join(SAMPLES, "digits_batch_logits_torch.npy"), logits)

    # ---- export ----
    torch.onnx.export(
        model, torch.from_numpy(batch[:1]), ONNX_PATH,
        export_params=True, opset_version=OPSET, do_constant_folding=True,
        input_names=["image"], output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.EVAL)

    import onnx
    m = onnx.load(ONNX_PATH)
    onnx.checker.check_model(m)
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"exported {ONNX_PATH} ({os.path.getsize(ONNX_PATH)} bytes), opset {OPSET}, ops: {', '.join(ops)}")
    print(f"samples: labels {labels.tolist()}, torch predictions {logits.argmax(1).tolist()}")
    print(f"training time: {train_s:.1f} s")
    print(f"test accuracy: {test_acc:.4f} ({int(round(test_acc * len(te_idx)))}/{len(te_idx)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

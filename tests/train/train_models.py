"""Small PyTorch models and PyTorch's own training loop, the references `ferry train` is checked
against (tests/train/check_train.py). Deterministic: fixed seeds, float32, one thread."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    """Conv-BN-ReLU-MaxPool, Conv(stride 2)-BN-ReLU, global average pool, Linear."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # as ResNet: no bias before BN
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class DeepCNN(nn.Module):
    """Three Conv-BN-ReLU-MaxPool blocks (16/32/64 channels), global average pool, Linear: the
    float64 study's model (tests/train/check_train_f64.py --cases deep-...), not a ctest case."""

    def __init__(self, classes=10):
        super().__init__()
        ch = [3, 16, 32, 64]
        self.convs = nn.ModuleList([nn.Conv2d(ch[i], ch[i + 1], 3, padding=1, bias=False) for i in range(3)])
        self.bns = nn.ModuleList([nn.BatchNorm2d(ch[i + 1]) for i in range(3)])
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        for conv, bn in zip(self.convs, self.bns):
            x = F.max_pool2d(F.relu(bn(conv(x))), 2)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Block(nn.Module):
    """A pre-norm transformer encoder block (2 heads) on [B, T, D], mean-pooled, then a classifier."""

    def __init__(self, d=16, heads=2, classes=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)  # a key bias has zero gradient (softmax is shift-invariant): Adam would amplify noise
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


def make(kind, seed=0):
    torch.manual_seed(seed)
    if kind == "cnn":
        return SmallCNN(), (3, 12, 12), 5
    if kind == "deep":
        return DeepCNN(), (3, 32, 32), 10
    return Block(), (6, 16), 4


def export(model, sample_shape, path, opset=17):
    x = torch.zeros((2,) + tuple(sample_shape))
    torch.onnx.export(model.train(), x, path, input_names=["x"], output_names=["logits"], opset_version=opset,
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def data(sample_shape, classes, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + tuple(sample_shape)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int64)
    return x, y


def make_optimizer(model, kind, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)


def train(model, x, y, batch, steps, opt, label_smoothing=0.0):
    """`ferry train --no-shuffle`: step k takes rows (k-1)*B .. k*B-1, wrapping around."""
    n = x.shape[0]
    losses = []
    model.train()
    for k in range(1, steps + 1):
        rows = [r % n for r in range((k - 1) * batch, k * batch)]
        xb, yb = torch.from_numpy(x[rows]), torch.from_numpy(y[rows])
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb, label_smoothing=label_smoothing)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

#!/usr/bin/env python3
"""Generate ferry's model zoo: real architectures exported from PyTorch at opset
13 and opset 17, with seeded inputs and PyTorch's reference outputs.

    /usr/bin/python3 tests/zoo/gen_zoo.py --out DIR [--only NAME,...] [--force] [--threads N]
    /usr/bin/python3 tests/zoo/gen_zoo.py --list          # exports and their cases
    /usr/bin/python3 tests/zoo/gen_zoo.py --list-cases    # case names, one a line

Every model is built with weights=None from a fixed seed; normalization affine
parameters are perturbed (so a kernel that drops a scale or a bias shows) and
BatchNorm running statistics are re-estimated on a few seeded batches (train mode,
momentum=None, no_grad, then eval) so activations have realistic scales.

Case folders use the tests/e2e layout (model.onnx, input_<i>.npy, expected_<k>.npy,
meta.json); the machinery is shared with tests/e2e/gen_models.py (tests/e2e/casegen.py).
Generation is incremental: complete cases are skipped.  Dynamic-batch exports have one
case per batch size (<name>_b1, _b3, _b8) sharing one hard-linked model.onnx; the
fpn_det_dynamic export also has dynamic height and width (<name>_b<B>_<H>x<W>).

Needs Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14, onnx 1.12); no network.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from casegen import SEED, main as casegen_main, recalibrate_bn  # noqa: E402
from gen_models import BertEncoder, bert_inputs, build_bert, image_input  # noqa: E402

OPSETS = (13, 17)
DYN_BATCHES = (1, 3, 8)


# ---------------------------------------------------------------------------
# model helpers
# ---------------------------------------------------------------------------

def perturb_norm_affine(model, seed):
    """weight ~ 1 + 0.1 N(0,1), bias ~ 0.1 N(0,1) for every BatchNorm / LayerNorm /
    GroupNorm (torchvision initializes them to exactly 1 and 0)."""
    g = torch.Generator().manual_seed(seed + 2000)
    norms = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norms) and getattr(m, "weight", None) is not None:
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=g))
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return model


def finish_cnn(model, shape=(3, 224, 224), batches=3, batch=4):
    perturb_norm_affine(model, SEED)
    return recalibrate_bn(model, SEED, batches=batches, batch=batch, shape=shape).eval()


def tv_model(ctor, **kw):
    import torchvision
    torch.manual_seed(SEED)
    return getattr(torchvision.models, ctor)(weights=None, **kw)


def build_tv_cnn(ctor):
    return finish_cnn(tv_model(ctor))


def build_vit():
    model = tv_model("vit_b_16")
    with torch.no_grad():
        # torchvision zero-initializes the classifier (and the class token): the
        # logits would be all zero.  Give them seeded values.
        g = torch.Generator().manual_seed(SEED + 3)
        model.heads.head.weight.copy_(0.02 * torch.randn(model.heads.head.weight.shape, generator=g))
        model.heads.head.bias.copy_(0.02 * torch.randn(model.heads.head.bias.shape, generator=g))
        model.class_token.copy_(0.02 * torch.randn(model.class_token.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("bias") and "ln" not in name and p.abs().max() < 1e-5:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))  # MLP biases are ~1e-6
    return perturb_norm_affine(model, SEED).eval()


def build_convnext():
    model = tv_model("convnext_tiny")
    with torch.no_grad():
        g = torch.Generator().manual_seed(SEED + 4)
        for m in model.modules():
            if hasattr(m, "layer_scale"):  # 1e-6 at init: blocks would be identities
                m.layer_scale.copy_(0.3 + 0.05 * torch.randn(m.layer_scale.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("bias") and p.dim() == 1 and float(p.abs().max()) == 0.0:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return perturb_norm_affine(model, SEED).eval()


def conv_bn_relu(cin, cout, k=3, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """4-level UNet; the decoder upsamples with
    nn.Upsample(scale_factor=2, mode='bilinear', align_corners=False)."""

    def __init__(self, cin=3, classes=2, base=16):
        super().__init__()
        ch = [base, base * 2, base * 4, base * 8, base * 16]
        self.enc = nn.ModuleList()
        prev = cin
        for c in ch:
            self.enc.append(nn.Sequential(conv_bn_relu(prev, c), conv_bn_relu(c, c)))
            prev = c
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec = nn.ModuleList()
        for c_skip in reversed(ch[:-1]):
            self.dec.append(nn.Sequential(conv_bn_relu(prev + c_skip, c_skip), conv_bn_relu(c_skip, c_skip)))
            prev = c_skip
        self.head = nn.Conv2d(prev, classes, 1)

    def forward(self, x):
        skips = []
        for i, enc in enumerate(self.enc):
            x = enc(x)
            if i < len(self.enc) - 1:
                skips.append(x)
                x = self.pool(x)
        for dec, skip in zip(self.dec, reversed(skips)):
            x = dec(torch.cat([self.up(x), skip], dim=1))
        return self.head(x)


UNET_HW = (96, 128)  # not square: catches H/W mix-ups


def build_unet():
    torch.manual_seed(SEED)
    return finish_cnn(UNet(), shape=(3,) + UNET_HW)


class FPNDetector(nn.Module):
    """Small detector: a 4-stage conv backbone (strides 4..32), a feature pyramid
    with a top-down path using F.interpolate(mode='nearest') (by size at one level,
    by scale_factor at the others, as torchvision and mmdet do), an extra P6 level,
    and shared RetinaNet-style class / box conv heads over P3..P6."""

    def __init__(self, classes=10, anchors=3, fpn=64):
        super().__init__()
        self.classes, self.anchors = classes, anchors
        self.stem = conv_bn_relu(3, 24, 3, 2)
        chans = [32, 64, 96, 128]
        self.stages = nn.ModuleList()
        prev = 24
        for i, c in enumerate(chans):
            self.stages.append(nn.Sequential(conv_bn_relu(prev, c, 3, 1 if i == 0 else 2),
                                             conv_bn_relu(c, c)))
            prev = c
        self.stem_pool = nn.MaxPool2d(3, 2, 1)
        self.lateral = nn.ModuleList([nn.Conv2d(c, fpn, 1) for c in chans[1:]])
        self.smooth = nn.ModuleList([nn.Conv2d(fpn, fpn, 3, padding=1) for _ in chans[1:]])

        def tower(out):
            return nn.Sequential(nn.Conv2d(fpn, fpn, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(fpn, fpn, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(fpn, out, 3, padding=1))
        self.cls_head = tower(anchors * classes)
        self.box_head = tower(anchors * 4)

    def forward(self, x):
        x = self.stem_pool(self.stem(x))
        feats = []
        for st in self.stages:
            x = st(x)
            feats.append(x)
        c3, c4, c5 = feats[1:]
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + F.interpolate(p5, size=c4.shape[-2:], mode="nearest")
        p3 = self.lateral[0](c3) + F.interpolate(p4, scale_factor=2.0, mode="nearest")
        levels = [self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5)]
        levels.append(F.max_pool2d(levels[-1], 1, 2, 0))  # P6
        cls, box = [], []
        for p in levels:
            n, _, h, w = p.shape
            c = self.cls_head(p).view(n, self.anchors, self.classes, h, w)
            b = self.box_head(p).view(n, self.anchors, 4, h, w)
            cls.append(c.permute(0, 3, 4, 1, 2).reshape(n, -1, self.classes))
            box.append(b.permute(0, 3, 4, 1, 2).reshape(n, -1, 4))
        return torch.cat(cls, 1), torch.cat(box, 1)


FPN_HW = (192, 256)


def build_fpn():
    torch.manual_seed(SEED)
    return finish_cnn(FPNDetector(), shape=(3,) + FPN_HW)


class BiLSTM(nn.Module):
    def __init__(self, inp=64, hidden=128, layers=2):
        super().__init__()
        self.lstm = nn.LSTM(inp, hidden, num_layers=layers, bidirectional=True)

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0, c0))
        return out, h, c


LSTM_SEQ, LSTM_BATCH, LSTM_IN, LSTM_HID = 50, 2, 64, 128


def build_lstm():
    torch.manual_seed(SEED)
    return BiLSTM(LSTM_IN, LSTM_HID).eval()


def lstm_inputs():
    g = torch.Generator().manual_seed(SEED + 21)
    return [torch.randn(LSTM_SEQ, LSTM_BATCH, LSTM_IN, generator=g),
            0.5 * torch.randn(4, LSTM_BATCH, LSTM_HID, generator=g),
            0.5 * torch.randn(4, LSTM_BATCH, LSTM_HID, generator=g)]


class GRUNet(nn.Module):
    """2-layer unidirectional batch_first GRU, zero initial state, plus a linear head."""

    def __init__(self, inp=64, hidden=128, layers=2, out=16):
        super().__init__()
        self.gru = nn.GRU(inp, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x):
        seq, h = self.gru(x)
        return self.head(seq), h


def build_gru():
    torch.manual_seed(SEED)
    return GRUNet(LSTM_IN, LSTM_HID).eval()


def gru_inputs():
    g = torch.Generator().manual_seed(SEED + 22)
    return [torch.randn(LSTM_BATCH, LSTM_SEQ, LSTM_IN, generator=g)]


def build_bert_small():
    torch.manual_seed(SEED + 5)
    return BertEncoder(vocab=1000, max_len=128, d_model=256, nhead=4, ff=1024, layers=2).eval()


def bert_var_inputs(batch, seq, seed):
    """Batch of sequences with different lengths: row i has pad_i trailing padding
    tokens (True in the mask), never a fully padded row."""
    g = torch.Generator().manual_seed(SEED + seed)
    ids = torch.randint(1, 1000, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    for i in range(batch):
        pad = (i * 7) % max(1, seq // 2)
        if pad:
            mask[i, seq - pad:] = True
            ids[i, seq - pad:] = 0
    return [ids, mask]


def bert_dynamic_export(opset, runs):
    name = f"bert_small_dynamic_op{opset}"
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"}}

    def sub(b, s):
        return (f"{name}_b{b}_s{s}", lambda: bert_var_inputs(b, s, 31 * b + s))
    return dict(name=name, model="bert_small", build=build_bert_small, build_key="bert_small", opset=opset,
                input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                dynamic_axes=axes, export_inputs=lambda: bert_var_inputs(2, 64, 0),
                subcases=[sub(b, s) for b, s in runs], tags=["dynamic"])


def rand_images(batch, hw, seed):
    g = torch.Generator().manual_seed(seed + 7)
    return torch.randn(batch, 3, *hw, generator=g)


# ---------------------------------------------------------------------------
# exports
# ---------------------------------------------------------------------------

def image_exports(model, build, hw=(224, 224), opsets=OPSETS, output_names=("output",), tags=()):
    """One static-shape export per opset, batch 1."""
    def make():
        return [image_input(1)] if hw == (224, 224) else [rand_images(1, hw, SEED)]
    return [dict(name=f"{model}_op{op}", model=model, build=build, build_key=model, opset=op,
                 input_names=["input"], output_names=list(output_names), dynamic_axes=None,
                 export_inputs=make, subcases=[(f"{model}_op{op}", make)], tags=list(tags))
            for op in opsets]


def dynbatch_export(model, build, opset, hw=(224, 224), output_names=("output",)):
    name = f"{model}_dynbatch_op{opset}"
    axes = {"input": {0: "batch"}}
    axes.update({o: {0: "batch"} for o in output_names})

    def sub(b):
        return (f"{model}_dynbatch_op{opset}_b{b}", lambda: [rand_images(b, hw, SEED + b)])
    return dict(name=name, model=model, build=build, build_key=model, opset=opset,
                input_names=["input"], output_names=list(output_names), dynamic_axes=axes,
                export_inputs=lambda: [rand_images(2, hw, SEED)],
                subcases=[sub(b) for b in DYN_BATCHES], tags=["dynamic"])


def dynamic_hw_export(model, build, opset, runs, output_names=("output",)):
    """Dynamic batch, height and width; runs = [(batch, (h, w)), ...]."""
    name = f"{model}_dynamic_op{opset}"
    axes = {"input": {0: "batch", 2: "height", 3: "width"}}
    axes.update({o: {0: "batch", 1: "anchors"} for o in output_names})

    def sub(b, hw):
        return (f"{name}_b{b}_{hw[0]}x{hw[1]}", lambda: [rand_images(b, hw, SEED + 100 * b + hw[0])])
    return dict(name=name, model=model, build=build, build_key=model, opset=opset,
                input_names=["input"], output_names=list(output_names), dynamic_axes=axes,
                export_inputs=lambda: [rand_images(2, runs[0][1], SEED)],
                subcases=[sub(b, hw) for b, hw in runs], tags=["dynamic"])


EXPORTS = (
    image_exports("resnet50", lambda: build_tv_cnn("resnet50"))
    + image_exports("mobilenet_v2", lambda: build_tv_cnn("mobilenet_v2"))
    + image_exports("mobilenet_v3_large", lambda: build_tv_cnn("mobilenet_v3_large"))
    + image_exports("efficientnet_b0", lambda: build_tv_cnn("efficientnet_b0"))
    + image_exports("vit_b_16", build_vit, tags=["slow"])
    + [dict(name=f"bert_encoder_op{op}", model="bert_encoder", build=build_bert, build_key="bert_encoder",
            opset=op, input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
            dynamic_axes=None, export_inputs=bert_inputs, subcases=[(f"bert_encoder_op{op}", bert_inputs)],
            tags=["slow"])
       for op in OPSETS]
    + [bert_dynamic_export(17, [(1, 128), (3, 64), (4, 37)])]
    + [dict(name=f"bilstm_op{op}", model="bilstm", build=build_lstm, build_key="bilstm", opset=op,
            input_names=["x", "h0", "c0"], output_names=["output", "h_n", "c_n"], dynamic_axes=None,
            export_inputs=lstm_inputs, subcases=[(f"bilstm_op{op}", lstm_inputs)], batch_dim=1)
       for op in OPSETS]
    + [dict(name=f"gru_op{op}", model="gru", build=build_gru, build_key="gru", opset=op,
            input_names=["x"], output_names=["output", "h_n"], dynamic_axes=None,
            export_inputs=gru_inputs, subcases=[(f"gru_op{op}", gru_inputs)])
       for op in OPSETS]
    + image_exports("unet", build_unet, hw=UNET_HW)
    + [dynbatch_export("unet", build_unet, 17, hw=UNET_HW)]
    + image_exports("fpn_det", build_fpn, hw=FPN_HW, output_names=("cls_logits", "bbox_regression"))
    + [dynamic_hw_export("fpn_det", build_fpn, 17, [(1, FPN_HW), (3, (128, 160)), (2, (320, 224))],
                         output_names=("cls_logits", "bbox_regression"))]
    + [dynbatch_export("resnet18", lambda: build_tv_cnn("resnet18"), 13)]
    + image_exports("densenet121", lambda: build_tv_cnn("densenet121"))
    + image_exports("squeezenet1_1", lambda: build_tv_cnn("squeezenet1_1"))
    + image_exports("shufflenet_v2_x1_0", lambda: build_tv_cnn("shufflenet_v2_x1_0"))
    + image_exports("convnext_tiny", build_convnext, tags=["slow"])
)


def main(argv=None):
    return casegen_main(EXPORTS, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

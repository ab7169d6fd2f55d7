#!/usr/bin/env python3
"""Generate ferry's end-to-end test assets: ONNX models exported from PyTorch,
seeded inputs and the PyTorch reference outputs.

    /usr/bin/python3 tests/e2e/gen_models.py --out DIR [--only NAME,...] [--force] [--list]

For each case DIR/<case>/ gets:
    model.onnx        exported with torch.onnx.export(do_constant_folding=True)
    input_<i>.npy     the test input(s), in the model's input order
    expected_<k>.npy  PyTorch's output k (the model's output order)
    meta.json         input/output names, shapes, dtypes, opset, ...

meta.json is written last, so a case whose meta.json and listed files exist is
complete and is skipped on a rerun (unless --force).  The machinery (export,
reference run, meta.json, the command line) is shared with tests/zoo/gen_zoo.py
in casegen.py.

Needs torch (1.13 tested), torchvision and onnx; no network (weights=None).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from casegen import SEED, main as casegen_main, recalibrate_bn, sanitize  # noqa: E402,F401


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

def build_cnn(ctor):
    import torchvision
    torch.manual_seed(SEED)
    model = getattr(torchvision.models, ctor)(weights=None)
    return recalibrate_bn(model, SEED).eval()


def image_input(batch, seed=SEED):
    g = torch.Generator().manual_seed(seed + 7)
    return torch.randn(batch, 3, 224, 224, generator=g)


class BertEncoder(nn.Module):
    """BERT-style encoder: token + learned position embeddings,
    6 post-norm transformer layers (GELU), final LayerNorm."""

    def __init__(self, vocab=1000, max_len=128, d_model=768, nhead=12, ff=3072, layers=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=ff,
                                           dropout=0.1, activation="gelu", batch_first=True)
        # enable_nested_tensor=False: no NestedTensor conversion of padded batches
        # (the nested fast path zeroes padded rows and cannot be exported).
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        # nn.TransformerEncoder deep-copies `layer`, so all layers start with the
        # same weights (and the exporter would dedupe them into Identity nodes).
        # Give each layer its own weights, and make biases and LayerNorm affine
        # parameters non-trivial so errors in them are visible in the output.
        for lyr in self.encoder.layers:
            lyr.self_attn._reset_parameters()
            lyr.self_attn.out_proj.reset_parameters()
            lyr.linear1.reset_parameters()
            lyr.linear2.reset_parameters()
        with torch.no_grad():
            for pname, prm in self.named_parameters():
                if pname.endswith("bias"):
                    prm.normal_(0.0, 0.02)
                elif prm.dim() == 1:  # LayerNorm weight
                    prm.copy_(1.0 + 0.1 * torch.randn_like(prm))

    def forward(self, input_ids, attention_mask):
        # attention_mask: bool [B, S], True = padding (src_key_padding_mask semantics)
        x = self.tok(input_ids) + self.pos[:, : input_ids.shape[1]]
        x = self.encoder(x, src_key_padding_mask=attention_mask)
        return self.norm(x)


def build_bert():
    torch.manual_seed(SEED)
    return BertEncoder().eval()


def bert_inputs(seq=128, pad=16, vocab=1000):
    g = torch.Generator().manual_seed(SEED + 11)
    ids = torch.randint(0, vocab, (1, seq), generator=g, dtype=torch.int64)
    mask = torch.zeros(1, seq, dtype=torch.bool)
    mask[:, seq - pad:] = True
    ids[:, seq - pad:] = 0  # pad token id
    return [ids, mask]


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------
# Each export: a model and one or more subcases, each with its own inputs;
# subcases share the exported model file.  The spec format is described in
# casegen.py; exports with the same build_key reuse one built model.

def cnn_export(name, ctor, opset):
    return dict(name=name, model=ctor, build=lambda: build_cnn(ctor), build_key=ctor, opset=opset,
                input_names=["input"], output_names=["output"], dynamic_axes=None,
                export_inputs=lambda: [image_input(1)],
                subcases=[(name, lambda: [image_input(1)])])


def bert_export(name, opset):
    return dict(name=name, model="bert_encoder", build=build_bert, build_key="bert_encoder", opset=opset,
                input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                dynamic_axes=None, export_inputs=bert_inputs,
                subcases=[(name, bert_inputs)])


EXPORTS = [
    cnn_export("resnet50_op13", "resnet50", 13),
    cnn_export("resnet50_op17", "resnet50", 17),
    cnn_export("mobilenet_v2_op13", "mobilenet_v2", 13),
    cnn_export("mobilenet_v2_op17", "mobilenet_v2", 17),
    bert_export("bert_encoder_op13", 13),
    bert_export("bert_encoder_op17", 17),
    dict(name="resnet18_dynbatch_op13", model="resnet18", build=lambda: build_cnn("resnet18"), opset=13,
         input_names=["input"], output_names=["output"],
         dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
         export_inputs=lambda: [image_input(1)],
         subcases=[("resnet18_dynbatch_b1", lambda: [image_input(1, seed=SEED + 1)]),
                   ("resnet18_dynbatch_b3", lambda: [image_input(3, seed=SEED + 3)])]),
]


def main(argv=None):
    return casegen_main(EXPORTS, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

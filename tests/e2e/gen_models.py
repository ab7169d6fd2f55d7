#!/usr/bin/env python3
"""Generate ferry's end-to-end test assets: ONNX models exported from PyTorch,
seeded inputs and the PyTorch reference outputs.

    /usr/bin/python3 tests/e2e/gen_models.py --out DIR [--only NAME,...] [--force]

For each case DIR/<case>/ gets:
    model.onnx        exported with torch.onnx.export(do_constant_folding=True)
    input_<i>.npy     the test input(s), in the model's input order
    expected_<k>.npy  PyTorch's output k (the model's output order)
    meta.json         input/output names, shapes, dtypes, opset, ...

meta.json is written last, so a case whose meta.json and listed files exist is
complete and is skipped on a rerun (unless --force).

Needs torch (1.13 tested), torchvision and onnx; no network (weights=None).
"""
import argparse
import json
import os
import re
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn

SEED = 0


def sanitize(name):
    """File stem ferry uses for an output name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

def recalibrate_bn(model, seed, batches=3, batch=4, shape=(3, 224, 224)):
    """Random-init CNNs give extreme activations in eval mode (running stats are
    mean 0 / var 1).  Re-estimate BN running stats as a cumulative average over
    a few seeded random batches, so the eval-mode activations have realistic
    scales."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average
    model.train()
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch, *shape, generator=g))
    model.eval()
    return model


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
# Each export: a model (built once per export) and one or more subcases, each
# with its own inputs; subcases share the exported model file.

def cnn_export(name, ctor, opset):
    return dict(name=name, build=lambda: build_cnn(ctor), opset=opset,
                input_names=["input"], output_names=["output"], dynamic_axes=None,
                export_inputs=lambda: [image_input(1)],
                subcases=[(name, lambda: [image_input(1)])])


def bert_export(name, opset):
    return dict(name=name, build=build_bert, opset=opset,
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
    dict(name="resnet18_dynbatch_op13", build=lambda: build_cnn("resnet18"), opset=13,
         input_names=["input"], output_names=["output"],
         dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
         export_inputs=lambda: [image_input(1)],
         subcases=[("resnet18_dynbatch_b1", lambda: [image_input(1, seed=SEED + 1)]),
                   ("resnet18_dynbatch_b3", lambda: [image_input(3, seed=SEED + 3)])]),
]


def case_complete(d):
    meta_path = os.path.join(d, "meta.json")
    if not os.path.isfile(meta_path):
        return False
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    files = ["model.onnx"] + meta.get("input_files", []) + meta.get("expected_files", [])
    return all(os.path.isfile(os.path.join(d, p)) for p in files)


def to_numpy(t):
    a = t.detach().cpu().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return np.ascontiguousarray(a)


def run_torch(model, inputs):
    # Grad stays enabled (parameters require grad), exactly as during
    # torch.onnx.export's trace: this keeps nn.TransformerEncoderLayer off its
    # fused inference fast path, so the reference is the same math as the graph.
    with torch.enable_grad():
        out = model(*inputs)
    if isinstance(out, torch.Tensor):
        out = [out]
    return [to_numpy(o) for o in out]


def onnx_summary(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    hist = {}
    for n in m.graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        hist[key] = hist.get(key, 0) + 1
    opsets = {(o.domain or "ai.onnx"): o.version for o in m.opset_import}
    return m, opsets, dict(sorted(hist.items()))


def io_info(m):
    inits = {i.name for i in m.graph.initializer}

    def info(vi):
        tt = vi.type.tensor_type
        import onnx
        dims = [d.dim_param if d.dim_param else d.dim_value for d in tt.shape.dim]
        return dict(name=vi.name, elem_type=onnx.TensorProto.DataType.Name(tt.elem_type), shape=dims)

    return ([info(v) for v in m.graph.input if v.name not in inits],
            [info(v) for v in m.graph.output])


def do_export(spec, out_dir, force):
    name = spec["name"]
    dirs = {sc: os.path.join(out_dir, sc) for sc, _ in spec["subcases"]}
    if not force and all(case_complete(d) for d in dirs.values()):
        print(f"[{name}] up to date, skipped", flush=True)
        return None
    t0 = time.time()
    model = spec["build"]()
    t_build = time.time() - t0

    first_dir = dirs[spec["subcases"][0][0]]
    os.makedirs(first_dir, exist_ok=True)
    for f in os.listdir(first_dir):  # stale files from an older run
        os.remove(os.path.join(first_dir, f))
    model_path = os.path.join(first_dir, "model.onnx")
    t1 = time.time()
    export_kwargs = dict(export_params=True, opset_version=spec["opset"], do_constant_folding=True,
                         input_names=spec["input_names"], output_names=spec["output_names"])
    if spec["dynamic_axes"]:
        export_kwargs["dynamic_axes"] = spec["dynamic_axes"]
    torch.onnx.export(model, tuple(spec["export_inputs"]()), model_path, **export_kwargs)
    t_export = time.time() - t1

    import onnx
    onnx.checker.check_model(model_path)
    m, opsets, hist = onnx_summary(model_path)
    graph_inputs, graph_outputs = io_info(m)
    if [i["name"] for i in graph_inputs] != spec["input_names"]:
        raise RuntimeError(f"{name}: graph inputs {graph_inputs} != {spec['input_names']}")
    if [o["name"] for o in graph_outputs] != spec["output_names"]:
        raise RuntimeError(f"{name}: graph outputs {graph_outputs} != {spec['output_names']}")

    results = []
    for sc, make_inputs in spec["subcases"]:
        d = dirs[sc]
        os.makedirs(d, exist_ok=True)
        if d != first_dir:
            for f in os.listdir(d):
                os.remove(os.path.join(d, f))
            dst = os.path.join(d, "model.onnx")
            try:
                os.link(model_path, dst)
            except OSError:
                shutil.copyfile(model_path, dst)
        t2 = time.time()
        inputs = make_inputs()
        expected = run_torch(model, inputs)
        t_run = time.time() - t2
        input_files, expected_files = [], []
        for i, t in enumerate(inputs):
            fn = f"input_{i}.npy"
            np.save(os.path.join(d, fn), to_numpy(t))
            input_files.append(fn)
        for k, a in enumerate(expected):
            fn = f"expected_{k}.npy"
            np.save(os.path.join(d, fn), a)
            expected_files.append(fn)
        meta = dict(
            case=sc, export=name, opset=spec["opset"], opset_import=opsets,
            torch_version=torch.__version__, onnx_version=onnx.__version__, seed=SEED,
            inputs=spec["input_names"], outputs=spec["output_names"],
            input_files=input_files, expected_files=expected_files,
            output_files=[sanitize(o) + ".npy" for o in spec["output_names"]],
            input_shapes=[list(t.shape) for t in inputs],
            input_dtypes=[str(to_numpy(t).dtype) for t in inputs],
            output_shapes=[list(a.shape) for a in expected],
            graph_inputs=graph_inputs, graph_outputs=graph_outputs,
            dynamic_axes={k: {str(a): v for a, v in ax.items()} for k, ax in (spec["dynamic_axes"] or {}).items()},
            op_histogram=hist,
        )
        with open(os.path.join(d, "meta.json.tmp"), "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(os.path.join(d, "meta.json.tmp"), os.path.join(d, "meta.json"))
        size = os.path.getsize(os.path.join(d, "model.onnx"))
        stats = ", ".join(f"out{k} {list(a.shape)} range [{a.min():.4g}, {a.max():.4g}]"
                          for k, a in enumerate(expected))
        print(f"[{sc}] build {t_build:.1f}s export {t_export:.1f}s torch-run {t_run:.2f}s "
              f"total {time.time() - t0:.1f}s; model.onnx {size / 2**20:.1f} MiB; {stats}", flush=True)
        results.append((sc, time.time() - t0))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (required unless --list)")
    ap.add_argument("--only", default="", help="comma-separated case names (an export name, "
                    "e.g. resnet18_dynbatch_op13, or one of its subcases, e.g. resnet18_dynbatch_b3)")
    ap.add_argument("--force", action="store_true", help="regenerate even if the files exist")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    if args.list:
        for spec in EXPORTS:
            subs = [sc for sc, _ in spec["subcases"]]
            print(spec["name"] + ("" if subs == [spec["name"]] else "  -> " + ", ".join(subs)))
        return 0
    if not args.out:
        ap.error("--out is required")

    torch.set_num_threads(args.threads)
    only = [s for s in args.only.split(",") if s]
    known = {spec["name"] for spec in EXPORTS} | {sc for spec in EXPORTS for sc, _ in spec["subcases"]}
    unknown = [s for s in only if s not in known]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for spec in EXPORTS:
        subs = {sc for sc, _ in spec["subcases"]}
        if only and spec["name"] not in only and not (subs & set(only)):
            continue
        do_export(spec, args.out, args.force)
    print(f"done in {time.time() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPU benchmark: ferry (--device cuda) vs PyTorch eager and torch.compile.

Models: ResNet-50 (torchvision's, or an identical local definition when torchvision is
missing) and the zoo's BERT-style encoder (tests/e2e/gen_models.py: 6 post-norm layers,
d_model 768, 12 heads, seq 128 with 16 padded tokens), at batch 1, 8 and 64, in fp32, fp16 and
bf16. Each (model, precision) is exported once to ONNX in that precision (dynamic batch); ferry
runs it through ferry_device_bench (tests/cuda/device_bench.cpp), host inputs to host outputs.
PyTorch is timed two ways: inputs already on the GPU (the usual number) and host to host (what
ferry's number includes: input and output copies). Every ferry output is checked against
PyTorch eager's in the same precision (cosine, max abs error / max |ref|).

    python3 bench/gpu_bench.py --runner build/ferry_device_bench --out OUT [--budget-s 330]
    python3 bench/gpu_bench.py --runner build/ferry_device_bench --out /tmp/x --dry-run   # CPU smoke test

Writes OUT/gpu_bench.json and OUT/gpu_bench.md. Rows are ordered by priority (the issue's
targets first: ResNet-50 batch 64, BERT batch 8); rows past the time budget are listed as
skipped, never guessed. Timing: warm-up runs, then `--iters` timed runs; the median is reported.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# numpy has no bfloat16, so every exported model takes fp32 images (or int64/bool tokens), casts
# them to the precision inside, and returns fp32: the inputs and outputs files stay plain .npz.


# --------------------------------------------------------------------------- models

def resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None)
    except Exception:  # noqa: BLE001 - torchvision missing or broken: same architecture, local
        return LocalResNet50()


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


class LocalResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for mid, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for b in range(blocks):
                layers.append(Bottleneck(cin, mid, stride if b == 0 else 1))
                cin = mid * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def bert(layers=6):
    from gen_models import BertEncoder  # the zoo's BERT-style encoder
    torch.manual_seed(0)
    return BertEncoder(layers=layers)


class CastIn(nn.Module):
    """Takes fp32 images (numpy has no bf16) and runs the wrapped model in `dtype`."""

    def __init__(self, model, dtype):
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, x):
        return self.model(x.to(self.dtype)).float()


class CastOut(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(ids, mask).float()


def make_case(name, precision, dry):
    """(module taking the ONNX inputs, input builder(batch) -> list of CPU tensors, input names)."""
    dt = DTYPES[precision]
    torch.manual_seed(0)
    if name == "resnet50":
        m = resnet50().eval().to(dt)
        size = 64 if dry else 224

        def inputs(b):
            g = torch.Generator().manual_seed(1)
            return [torch.randn(b, 3, size, size, generator=g)]
        return CastIn(m, dt).eval(), inputs, ["image"]
    m = bert(layers=2 if dry else 6).eval().to(dt)
    seq = 32 if dry else 128

    def inputs(b):
        g = torch.Generator().manual_seed(2)
        ids = torch.randint(0, 1000, (b, seq), generator=g, dtype=torch.int64)
        mask = torch.zeros(b, seq, dtype=torch.bool)
        mask[:, seq - seq // 8:] = True
        ids[:, seq - seq // 8:] = 0
        return [ids, mask]
    return CastOut(m).eval(), inputs, ["input_ids", "attention_mask"]


# --------------------------------------------------------------------------- export

def export(module, example, names, path):
    """ONNX opset 17 with a dynamic batch; the TorchScript exporter first, then dynamo."""
    dyn = {n: {0: "batch"} for n in names}
    dyn["output"] = {0: "batch"}
    errors = []
    for kwargs in ({"dynamo": False}, {}):
        try:
            torch.onnx.export(module, tuple(example), path, opset_version=17, input_names=names,
                              output_names=["output"], dynamic_axes=dyn, **kwargs)
            return "torchscript" if kwargs else "default"
        except TypeError as e:  # torch 1.x has no `dynamo` argument
            errors.append(repr(e))
            continue
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    raise RuntimeError("ONNX export failed: " + " | ".join(errors))


# --------------------------------------------------------------------------- timing

def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_fn(fn, warmup, iters, dev):
    for _ in range(warmup):
        fn()
    sync(dev)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def compare(got, ref):
    a, b = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    cos = float(a @ b / denom) if denom > 0 else float("nan")
    scale = float(np.max(np.abs(b))) or 1.0
    return cos, float(np.max(np.abs(a - b))) / scale


def run_ferry(runner, onnx_path, npz, device, warmup, iters, out_npz, timeout):
    cmd = [runner, onnx_path, npz, device, str(warmup), str(iters), out_npz]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"ferry_device_bench exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", required=True, help="ferry_device_bench binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="folder for ONNX exports (default OUT/../gpu_bench_work)")
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--precisions", default="fp32,fp16,bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="seconds for the whole run: rows start until 60%% of it (all of it with --no-compile), "
                         "torch.compile runs in the rest")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU smoke test: small inputs, 2-layer BERT, fp32, batch 1-2, ferry on cpu, no torch.compile")
    args = ap.parse_args()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    work = args.work or os.path.join(os.path.dirname(os.path.abspath(args.out)), "gpu_bench_work")
    os.makedirs(work, exist_ok=True)
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    precisions = args.precisions.split(",")
    ferry_device = args.device
    if args.dry_run:
        batches, precisions, ferry_device, args.no_compile = [1, 2], ["fp32"], "cpu", True
        args.warmup, args.iters = 1, 3
    dev = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
           "ferry_device": ferry_device, "tf32": "off (torch.backends.*.allow_tf32 = False; ferry default)"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True

    # Priority order: the targets first, then the rest.
    rows = [(m, p, b) for m in models for p in precisions for b in batches]
    target = {("resnet50", 64), ("bert", 8)}
    rows.sort(key=lambda r: (0 if (r[0], r[2]) in target else 1, precisions.index(r[1]), models.index(r[0]), r[2]))
    results, exported = [], {}
    for model, prec, batch in rows:
        row = {"model": model, "precision": prec, "batch": batch}
        results.append(row)
        if time.time() - t_start > (args.budget_s if args.no_compile else 0.6 * args.budget_s):
            row["skipped"] = "time budget"
            continue
        try:
            key = (model, prec)
            if key not in exported:
                module, make_inputs, names = make_case(model, prec, args.dry_run)
                path = os.path.join(work, f"{model}_{prec}.onnx")
                t0 = time.time()
                # Traced on the benchmark device: CPU kernels lack some fp16/bf16 ops.
                module = module.to(dev)
                how = export(module, [t.to(dev) for t in make_inputs(2)], names, path)
                exported[key] = (module, make_inputs, names, path, how, round(time.time() - t0, 1))
            module, make_inputs, names, path, how, export_s = exported[key]
            row["export"] = f"{how} ({export_s} s)"
            inputs = make_inputs(batch)
            npz = os.path.join(work, f"{model}_{prec}_b{batch}_in.npz")
            np.savez(npz, **{n: t.numpy() for n, t in zip(names, inputs)})
            # PyTorch eager, same precision.
            m = module.to(dev).eval()  # export() restores the mode it found: keep it eval
            dev_in = [t.to(dev) for t in inputs]
            with torch.inference_mode():
                ref = m(*dev_in).float().cpu().numpy()
                row["torch_eager_ms"] = time_fn(lambda: m(*dev_in), args.warmup, args.iters, dev)
                row["torch_eager_h2h_ms"] = time_fn(lambda: m(*[t.to(dev) for t in inputs]).cpu(), args.warmup,
                                                    args.iters, dev)
            # ferry.
            out_npz = os.path.join(work, f"{model}_{prec}_b{batch}_out.npz")
            left = max(30.0, args.budget_s + 120 - (time.time() - t_start))
            f = run_ferry(args.runner, path, npz, ferry_device, args.warmup, args.iters, out_npz, left)
            row.update({"ferry_ms": f["median_ms"], "ferry_p90_ms": f["p90_ms"], "ferry_load_ms": f["load_ms"],
                        "ferry_first_run_ms": f["first_run_ms"], "ferry_backend": f["backend"]})
            got = np.load(out_npz)["output"]
            row["cosine"], row["max_err_rel"] = compare(got, ref)
            row["speedup_vs_eager"] = row["torch_eager_ms"] / row["ferry_ms"]
        except Exception as e:  # noqa: BLE001 - recorded per row; the run goes on
            row["error"] = f"{type(e).__name__}: {str(e)[-400:]}"
        print(json.dumps(row), flush=True)

    # torch.compile last, the target rows first, while the budget lasts (each compile of
    # a new shape takes tens of seconds).
    for row in results:
        if args.no_compile or "ferry_ms" not in row:
            continue
        if time.time() - t_start > args.budget_s:
            row["compile_skipped"] = "time budget"
            continue
        try:
            module, make_inputs, names, _, _, _ = exported[(row["model"], row["precision"])]
            m = module.to(dev).eval()
            dev_in = [t.to(dev) for t in make_inputs(row["batch"])]
            t0 = time.time()
            torch._dynamo.reset()
            cm = torch.compile(m)
            with torch.inference_mode():
                cm(*dev_in)
                sync(dev)
                row["torch_compile_s"] = round(time.time() - t0, 1)
                row["torch_compile_ms"] = time_fn(lambda: cm(*dev_in), args.warmup, args.iters, dev)
            row["speedup_vs_compile"] = row["torch_compile_ms"] / row["ferry_ms"]
        except Exception as e:  # noqa: BLE001
            row["compile_error"] = f"{type(e).__name__}: {str(e)[-300:]}"
        print(json.dumps(row), flush=True)

    summary = {"env": env, "wall_s": round(time.time() - t_start, 1), "rows": results,
               "args": {k: v for k, v in vars(args).items()}}
    with open(os.path.join(args.out, "gpu_bench.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as fh:
        fh.write(markdown(summary))
    print(markdown(summary))
    return 0


def fmt(v, nd=2):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def markdown(s):
    e = s["env"]
    lines = [f"GPU benchmark: {e['device']}, torch {e['torch']}, ferry --device {e['ferry_device']}, TF32 {e['tf32']}. "
             f"Median of {s['args']['iters']} runs after {s['args']['warmup']} warm-ups; wall {s['wall_s']} s. "
             "ferry: host inputs to host outputs; eager/compile: inputs on the GPU (eager h2h: host to host).", "",
             "| model | prec | batch | ferry ms | eager ms | eager h2h ms | compile ms | x eager | x compile | cosine | max err/max | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        note = r.get("skipped") or r.get("error") or r.get("compile_error") or \
            ("compile: " + r["compile_skipped"] if "compile_skipped" in r else "")
        lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {fmt(r.get('ferry_ms'))} | "
                     f"{fmt(r.get('torch_eager_ms'))} | {fmt(r.get('torch_eager_h2h_ms'))} | {fmt(r.get('torch_compile_ms'))} | "
                     f"{fmt(r.get('speedup_vs_eager'))} | {fmt(r.get('speedup_vs_compile'))} | "
                     f"{fmt(r.get('cosine'), 6)} | {fmt(r.get('max_err_rel'), 5)} | {note.replace('|', '/')[:120]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

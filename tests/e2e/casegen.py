"""Shared machinery for ferry's PyTorch -> ONNX test-case generators
(tests/e2e/gen_models.py, tests/zoo/gen_zoo.py).

An *export spec* is a dict:
    name           export name (also the case name when there is one subcase)
    build          () -> torch.nn.Module in eval mode (seeded)
    opset          ONNX opset to export at
    input_names    graph input names, in order
    output_names   graph output names, in order
    dynamic_axes   torch.onnx.export dynamic_axes, or None
    export_inputs  () -> list of tensors used to trace the export
    subcases       [(case name, () -> list of input tensors), ...]; each subcase gets
                   its own folder (the model file is hard-linked) and reference outputs
  optional:
    model          model family name for reports (default: name)
    batch_dim      dim of the first input that is the batch (default 0)
    build_key      cache key: consecutive exports with the same key reuse the built
                   model (e.g. the opset-13 and opset-17 exports of one network)
    tags           list of strings copied into meta.json (e.g. ["slow"])

Each case folder DIR/<case>/ gets
    model.onnx        exported with torch.onnx.export(do_constant_folding=True)
    input_<i>.npy     the test input(s), in the model's input order
    expected_<k>.npy  PyTorch's output k (the model's output order)
    meta.json         input/output names, shapes, dtypes, opset, ...  (written last)

A case whose meta.json and listed files exist is complete and is skipped on a
rerun (unless --force).
"""
import argparse
import json
import os
import re
import shutil
import sys
import time

import numpy as np

SEED = 0


def sanitize(name):
    """File stem ferry uses for an output name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def recalibrate_bn(model, seed, batches=3, batch=4, shape=(3, 224, 224), make_input=None):
    """Random-init CNNs give extreme activations in eval mode (running stats are
    mean 0 / var 1).  Re-estimate BN running stats as a cumulative average over
    a few seeded random batches (train mode, momentum=None, no_grad), so the
    eval-mode activations have realistic scales.  make_input(generator) may
    replace the default torch.randn(batch, *shape) input."""
    import torch
    import torch.nn as nn
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average
    model.train()
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for _ in range(batches):
            x = make_input(g) if make_input else torch.randn(batch, *shape, generator=g)
            model(*x) if isinstance(x, (list, tuple)) else model(x)
    model.eval()
    return model


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


def flatten_outputs(out):
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(flatten_outputs(o))
        return res
    return [out]


def run_torch(model, inputs):
    # Grad stays enabled (parameters require grad), exactly as during
    # torch.onnx.export's trace: this keeps nn.TransformerEncoderLayer /
    # nn.MultiheadAttention off their fused inference fast paths, so the
    # reference is the same math as the graph.
    import torch
    with torch.enable_grad():
        out = model(*inputs)
    return [to_numpy(o) for o in flatten_outputs(out)]


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
    import onnx
    inits = {i.name for i in m.graph.initializer}

    def info(vi):
        tt = vi.type.tensor_type
        dims = [d.dim_param if d.dim_param else d.dim_value for d in tt.shape.dim]
        return dict(name=vi.name, elem_type=onnx.TensorProto.DataType.Name(tt.elem_type), shape=dims)

    return ([info(v) for v in m.graph.input if v.name not in inits],
            [info(v) for v in m.graph.output])


def dir_size(d):
    """Bytes used by the files of a case folder (hard links counted once per inode
    by the caller; here every file is counted)."""
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if os.path.isfile(os.path.join(d, f)))


class ModelCache:
    """Keeps the last built model so the opset-13 and opset-17 exports of one
    network are built (and BN-recalibrated) once."""

    def __init__(self):
        self.key = None
        self.model = None

    def get(self, spec):
        key = spec.get("build_key")
        if key is not None and key == self.key:
            return self.model, True
        self.key, self.model = None, None  # free the previous model first
        model = spec["build"]()
        if key is not None:
            self.key, self.model = key, model
        return model, False


def do_export(spec, out_dir, force, cache=None, index=0):
    """Exports one spec and writes its subcases.  Returns a list of
    (case, seconds, bytes) for the cases written, or None when up to date."""
    import torch
    import onnx
    name = spec["name"]
    dirs = {sc: os.path.join(out_dir, sc) for sc, _ in spec["subcases"]}
    if not force and all(case_complete(d) for d in dirs.values()):
        print(f"[{name}] up to date, skipped", flush=True)
        return None
    t0 = time.time()
    if cache is not None:
        model, cached = cache.get(spec)
    else:
        model, cached = spec["build"](), False
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

    onnx.checker.check_model(model_path)
    m, opsets, hist = onnx_summary(model_path)
    graph_inputs, graph_outputs = io_info(m)
    del m
    if [i["name"] for i in graph_inputs] != spec["input_names"]:
        raise RuntimeError(f"{name}: graph inputs {graph_inputs} != {spec['input_names']}")
    if [o["name"] for o in graph_outputs] != spec["output_names"]:
        raise RuntimeError(f"{name}: graph outputs {graph_outputs} != {spec['output_names']}")

    results = []
    for subindex, (sc, make_inputs) in enumerate(spec["subcases"]):
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
        if len(expected) != len(spec["output_names"]):
            raise RuntimeError(f"{sc}: torch gave {len(expected)} outputs, "
                               f"spec names {len(spec['output_names'])}")
        input_files, expected_files = [], []
        for i, t in enumerate(inputs):
            fn = f"input_{i}.npy"
            np.save(os.path.join(d, fn), to_numpy(t))
            input_files.append(fn)
        for k, a in enumerate(expected):
            fn = f"expected_{k}.npy"
            np.save(os.path.join(d, fn), a)
            expected_files.append(fn)
        batch_dim = spec.get("batch_dim", 0)
        meta = dict(
            case=sc, export=name, model=spec.get("model", name), index=index, subindex=subindex,
            opset=spec["opset"], opset_import=opsets,
            batch=int(inputs[0].shape[batch_dim]) if inputs[0].dim() > batch_dim else 1,
            dynamic=bool(spec["dynamic_axes"]), tags=list(spec.get("tags", [])),
            torch_version=torch.__version__, onnx_version=onnx.__version__, seed=SEED,
            inputs=spec["input_names"], outputs=spec["output_names"],
            input_files=input_files, expected_files=expected_files,
            output_files=[sanitize(o) + ".npy" for o in spec["output_names"]],
            input_shapes=[list(t.shape) for t in inputs],
            input_dtypes=[str(to_numpy(t).dtype) for t in inputs],
            output_shapes=[list(a.shape) for a in expected],
            output_dtypes=[str(a.dtype) for a in expected],
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
        elapsed = time.time() - t0
        print(f"[{sc}] build {t_build:.1f}s{' (cached)' if cached else ''} export {t_export:.1f}s "
              f"torch-run {t_run:.2f}s total {elapsed:.1f}s; model.onnx {size / 2**20:.1f} MiB; {stats}",
              flush=True)
        # bytes this case adds: the model only for the first subcase (others are hard links)
        new_bytes = dir_size(d) - (0 if d == first_dir else size)
        results.append((sc, elapsed, new_bytes))
        t0 = time.time()
        t_build = t_export = 0.0
    return results


def case_names(exports):
    return [sc for spec in exports for sc, _ in spec["subcases"]]


def main(exports, description, argv=None, default_threads=2):
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (required unless --list)")
    ap.add_argument("--only", default="", help="comma-separated case names (an export name, "
                    "e.g. resnet18_dynbatch_op13, or one of its subcases, e.g. resnet18_dynbatch_b3)")
    ap.add_argument("--force", action="store_true", help="regenerate even if the files exist")
    ap.add_argument("--list", action="store_true", help="list the exports and their cases, and exit")
    ap.add_argument("--list-cases", action="store_true", help="print the case names, one a line, and exit")
    ap.add_argument("--tags", default="", help="only exports with one of these comma-separated tags")
    ap.add_argument("--exclude-tags", default="", help="skip exports with any of these comma-separated tags")
    ap.add_argument("--check-cases", metavar="LIST",
                    help="exit 1 unless the case names are exactly LIST (comma- or semicolon-separated, "
                    "in order); for a build system that lists the cases")
    ap.add_argument("--threads", type=int, default=default_threads)
    args = ap.parse_args(argv)
    all_exports = list(exports)

    want_tags = {t for t in args.tags.split(",") if t}
    skip_tags = {t for t in args.exclude_tags.split(",") if t}
    exports = [e for e in exports
               if (not want_tags or want_tags & set(e.get("tags", [])))
               and not (skip_tags & set(e.get("tags", [])))]
    if args.check_cases is not None:
        listed = [c for c in re.split(r"[,;]", args.check_cases) if c]
        actual = case_names(exports)
        if listed == actual:
            print(f"{len(actual)} cases, as listed")
            return 0
        print("the case list differs from the generator's (--list-cases):", file=sys.stderr)
        print("  listed but not generated: " + (", ".join(c for c in listed if c not in actual) or "-"),
              file=sys.stderr)
        print("  generated but not listed: " + (", ".join(c for c in actual if c not in listed) or "-"),
              file=sys.stderr)
        print("  generator's list: " + ";".join(actual), file=sys.stderr)
        return 1
    if args.list_cases:
        print("\n".join(case_names(exports)))
        return 0
    if args.list:
        for spec in exports:
            subs = [sc for sc, _ in spec["subcases"]]
            print(spec["name"] + ("" if subs == [spec["name"]] else "  -> " + ", ".join(subs)))
        return 0
    if not args.out:
        ap.error("--out is required")

    import torch
    torch.set_num_threads(args.threads)
    only = [s for s in args.only.split(",") if s]
    known = {spec["name"] for spec in exports} | set(case_names(exports))
    unknown = [s for s in only if s not in known]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    cache = ModelCache()
    written = []
    for spec in exports:
        index = all_exports.index(spec)
        subs = {sc for sc, _ in spec["subcases"]}
        if only and spec["name"] not in only and not (subs & set(only)):
            continue
        res = do_export(spec, args.out, args.force, cache, index)
        written.extend(res or [])
    total = time.time() - t0
    if written:
        print("\ncases written (seconds, MiB added):")
        for sc, secs, nbytes in written:
            print(f"  {sc:32s} {secs:7.1f}s {nbytes / 2**20:8.1f} MiB")
    used = 0
    seen = set()
    for root, _dirs, files in os.walk(args.out):
        for f in files:
            st = os.stat(os.path.join(root, f))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                used += st.st_size
    print(f"done in {total:.1f}s; {args.out} holds {used / 2**20:.0f} MiB "
          f"(hard links counted once)", flush=True)
    return 0

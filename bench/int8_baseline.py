#!/usr/bin/python3
"""The plainest post-training int8 quantization, as a reproducible accuracy baseline for `ferry quantize`.

    /usr/bin/python3 bench/int8_baseline.py --case DIR --work WORK [--ferry build/ferry] [--samples 32]
        [--heldout 8] [--seed 38] [--threads 2] [--engine ort|ferry-ref] [--ferry-arg=--method=minmax ...]
        [--ferry-file F.onnx | --no-ferry] [--calibration-cosine] [--json OUT.json]

DIR is a zoo case folder (tests/zoo/gen_zoo.py: model.onnx, input_<i>.npy in the model's input order).
What it does, every step recorded under WORK so each figure reproduces:

1. Data (WORK/data): `--samples` calibration samples (calib.npz, arrays named after the inputs, samples
   on axis 0) and `--heldout` held-out samples (heldout.npz, and heldout/h<k>/<input>.npy), drawn from
   numpy's default_rng(seed) to match the zoo input's statistics: a float input N(mean, std) of
   input_<i>.npy; an integer input uniform over [min, max] of input_<i>.npy, keeping 0 wherever
   input_<i>.npy holds 0 (the pad token under the mask); a bool input copied.
2. Baseline (WORK/baseline.onnx), built with the onnx package and nothing else: per-tensor asymmetric
   uint8 QuantizeLinear/DequantizeLinear on every float activation input of every Conv, Gemm and
   MatMul (the same Q/DQ feeds every such consumer of the tensor; other consumers read the float
   tensor), ranges = the min and max over the calibration samples (scale = (max(hi,0) - min(lo,0)) /
   255, zero point = round(-min(lo,0) / scale)), collected by running the float model with those
   tensors made graph outputs in ONNX Runtime (bench/ort_bench.js; `--engine ferry-ref`: ferry's
   reference kernels, `ferry run -d cpu-ref`, for the float model and the baseline); weights (initializer input 1)
   per-channel symmetric int8 MinMax (scale_c = max|W_c| / 127, round half to even, [-127, 127];
   axis 0 for Conv and Gemm transB=1, else the last); biases and everything else untouched (float).
3. ferry's file (WORK/ferry.int8.onnx): `ferry quantize model.onnx --calibration calib.npz` with no
   flags (plus any `--ferry-arg`).
4. Held-out cosine to the float model (ONNX Runtime fp32 on the float model): the baseline in ONNX
   Runtime, ferry's file in ferry (`ferry run`, cpu, default opt level) and in ONNX Runtime (with
   `--engine ferry-ref`: the float model and the baseline by ferry's reference kernels). Per
   sample the cosine of each output (flattened, float64), the worst output; the mean over samples.
   `--calibration-cosine`: the same on the calibration samples too (after the held-out figures).

ONNX Runtime 1.30 runs through bench/ort_bench.js (`npm install --ignore-scripts onnxruntime-node@1.30.0`
in bench/).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sh(cmd, timeout=1800):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"int8_baseline: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def safe(name):  # bench/ort_bench.js's output file name
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


# ---------------------------------------------------------------- data

def make_data(case, model, work, samples, heldout, seed):
    d = os.path.join(work, "data")
    os.makedirs(os.path.join(d, "heldout"), exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [i.name for i in graph_inputs(model)]
    total = samples + heldout
    arrays = {}
    for idx, name in enumerate(names):
        x0 = np.load(os.path.join(case, f"input_{idx}.npy"))
        shape = (total,) + x0.shape[1:] if x0.shape and x0.shape[0] == 1 else (total,) + x0.shape
        if x0.dtype == np.bool_:
            a = np.broadcast_to(x0.reshape((1,) + shape[1:]), shape).copy()
        elif np.issubdtype(x0.dtype, np.integer):
            lo, hi = int(x0.min()), int(x0.max())
            a = rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(x0.dtype)
            a[np.broadcast_to(x0.reshape((1,) + shape[1:]) == 0, shape)] = 0
        else:
            a = (rng.standard_normal(size=shape) * float(x0.std()) + float(x0.mean())).astype(x0.dtype)
        arrays[name] = a
    np.savez(os.path.join(d, "calib.npz"), **{n: a[:samples] for n, a in arrays.items()})
    np.savez(os.path.join(d, "heldout.npz"), **{n: a[samples:] for n, a in arrays.items()})

    def files(sub, first, count):
        out = []
        for k in range(count):
            sd = os.path.join(d, sub, f"{sub[0]}{k}")
            os.makedirs(sd, exist_ok=True)
            f = {}
            for n, a in arrays.items():
                f[n] = os.path.join(sd, safe(n) + ".npy")
                np.save(f[n], a[first + k:first + k + 1])
            out.append(f)
        return out
    return files("calib", 0, samples), files("heldout", samples, heldout)


# ---------------------------------------------------------------- running

def run_ort(model_path, feeds, out_dir, threads):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    cmd = ["node", os.path.join(HERE, "ort_bench.js"), "--model", model_path, "--threads", str(threads),
           "--warmup", "0", "--iterations", "1", "--output-dir", out_dir]
    for n, f in feeds.items():
        cmd += ["--input", f"{n}={f}"]
    sh(cmd)
    return out_dir


def run_ferry(ferry, model_path, feeds, out_dir, threads, device="cpu"):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    cmd = [ferry, "run", model_path, "-o", out_dir, "-t", str(threads), "-d", device]
    for n, f in feeds.items():
        cmd += ["-i", f"{n}={f}"]
    sh(cmd)
    return out_dir


def load_outputs(out_dir, names):
    got = {}
    for n in names:
        f = os.path.join(out_dir, safe(n) + ".npy")
        if not os.path.exists(f):
            cands = sorted(glob.glob(os.path.join(out_dir, "*.npy")))
            if len(names) == 1 and len(cands) == 1:
                f = cands[0]
            else:
                sys.exit(f"int8_baseline: output {n} not found in {out_dir}")
        got[n] = np.load(f)
    return got


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-300))


# ---------------------------------------------------------------- the baseline QDQ file

def weight_of(graph, name, producers):
    """The initializer `name` is, directly or through Identity nodes; else None."""
    inits = {i.name: i for i in graph.initializer}
    for _ in range(8):
        if name in inits:
            return inits[name]
        p = producers.get(name)
        if p is None or p.op_type != "Identity":
            return None
        name = p.input[0]
    return None


def activation_inputs(model):
    """(node, slot, tensor) of every float activation input of Conv/Gemm/MatMul, and the weights."""
    g = model.graph
    producers = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    acts, weights = [], []
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        slots = [0, 1] if n.op_type != "Conv" else [0]
        for s in slots:
            v = n.input[s]
            w = weight_of(g, v, producers) if s == 1 else None
            if w is not None:
                weights.append((n, s, w))
            elif v not in inits and not (v in producers and producers[v].op_type == "Constant"):
                acts.append((n, s, v))
        if n.op_type == "Conv" and len(n.input) > 1:
            w = weight_of(g, n.input[1], producers)
            if w is not None:
                weights.append((n, 1, w))
    return acts, weights


def run_engine(args, engine, model_path, feeds, out_dir):
    if engine == "ort":
        return run_ort(model_path, feeds, out_dir, args.threads)
    return run_ferry(args.ferry, model_path, feeds, out_dir, args.threads, "cpu-ref" if engine == "ferry-ref" else "cpu")


def collect_ranges(args, model, model_path, calib_files, work):
    acts, _ = activation_inputs(model)
    tensors = sorted({v for _, _, v in acts})
    aug = onnx.load(model_path)
    outs = {o.name for o in aug.graph.output}
    for t in tensors:
        if t not in outs:
            aug.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    aug_path = os.path.join(work, "ranges_model.onnx")
    onnx.save(aug, aug_path)
    lo = {t: np.inf for t in tensors}
    hi = {t: -np.inf for t in tensors}
    for k, feeds in enumerate(calib_files):
        got = load_outputs(run_engine(args, args.engine, aug_path, feeds, os.path.join(work, "ranges_out")), tensors)
        for t, a in got.items():
            lo[t] = min(lo[t], float(a.min()))
            hi[t] = max(hi[t], float(a.max()))
    os.remove(aug_path)
    shutil.rmtree(os.path.join(work, "ranges_out"), ignore_errors=True)
    return {t: (lo[t], hi[t]) for t in tensors}


def build_baseline(model, ranges):
    g = model.graph
    acts, weights = activation_inputs(model)
    new_inits, pre_nodes, after = [], [], {}  # after: tensor -> Q/DQ nodes placed after its producer
    dq_of = {}
    skipped = []
    for t in sorted({v for _, _, v in acts}):
        lo, hi = ranges[t]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            skipped.append(t)
            continue
        rmin, rmax = min(lo, 0.0), max(hi, 0.0)
        scale = np.float32((rmax - rmin) / 255.0)
        if not scale > 0:
            scale, zp = np.float32(1.0), 0
        else:
            zp = int(np.clip(np.rint(-rmin / scale), 0, 255))
        sn, zn = t + "_scale", t + "_zero_point"
        new_inits += [numpy_helper.from_array(np.array(scale, np.float32), sn),
                      numpy_helper.from_array(np.array(zp, np.uint8), zn)]
        qo, dqo = t + "_QuantizeLinear_Output", t + "_DequantizeLinear_Output"
        nodes = [helper.make_node("QuantizeLinear", [t, sn, zn], [qo], name=t + "_QuantizeLinear"),
                 helper.make_node("DequantizeLinear", [qo, sn, zn], [dqo], name=t + "_DequantizeLinear")]
        after[t] = nodes
        dq_of[t] = dqo
    for n, s, v in acts:
        if v in dq_of:
            n.input[s] = dq_of[v]
    wdq = {}
    removed = set()
    for n, s, w in weights:
        axis = 0
        if n.op_type == "Gemm":
            tb = [a.i for a in n.attribute if a.name == "transB"]
            axis = 0 if tb and tb[0] else 1
        elif n.op_type == "MatMul":
            axis = len(w.dims) - 1
        key = (w.name, axis)
        if key not in wdq:
            W = numpy_helper.to_array(w).astype(np.float32)
            red = tuple(i for i in range(W.ndim) if i != axis)
            m = np.abs(W).max(axis=red)
            sc = np.where((m > 0) & np.isfinite(m), m / 127.0, 1.0).astype(np.float32)
            shape = [1] * W.ndim
            shape[axis] = -1
            q = np.clip(np.rint(W / sc.reshape(shape)), -127, 127).astype(np.int8)
            base = w.name + ("" if axis == 0 else f"_axis{axis}")
            new_inits += [numpy_helper.from_array(q, base + "_quantized"),
                          numpy_helper.from_array(sc, base + "_wscale"),
                          numpy_helper.from_array(np.zeros(sc.shape, np.int8), base + "_wzero_point")]
            pre_nodes.append(helper.make_node("DequantizeLinear", [base + "_quantized", base + "_wscale",
                                                                   base + "_wzero_point"],
                                              [base + "_DequantizeLinear_Output"], name=base + "_DequantizeLinear",
                                              axis=axis))
            wdq[key] = base + "_DequantizeLinear_Output"
        n.input[s] = wdq[key]
        removed.add(w.name)
    # Drop float weights nothing reads any more.
    still = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name not in removed or i.name in still]
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    nodes = list(pre_nodes)
    for t in [i.name for i in graph_inputs(model)]:
        nodes += after.pop(t, [])
    for n in list(g.node):
        nodes.append(n)
        for o in n.output:
            nodes += after.pop(o, [])
    for t, extra in after.items():  # an initializer-free tensor without a producer: cannot happen
        sys.exit(f"int8_baseline: no producer for {t}")
    del g.node[:]
    g.node.extend(nodes)
    return len(dq_of), len(wdq), skipped


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, help="zoo case folder (model.onnx, input_<i>.npy)")
    ap.add_argument("--work", required=True, help="folder for the data, the files and the outputs")
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--heldout", type=int, default=8)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", choices=["ort", "ferry-ref"], default="ort",
                    help="what collects the ranges and runs the float model and the baseline: ONNX Runtime "
                         "(default) or ferry's reference kernels (`ferry run -d cpu-ref`, opt level 0)")
    ap.add_argument("--ferry-arg", action="append", default=[], help="extra ferry quantize argument (repeat)")
    ap.add_argument("--ferry-file", help="measure this QDQ file instead of running ferry quantize")
    ap.add_argument("--no-ferry", action="store_true", help="only the baseline")
    ap.add_argument("--calibration-cosine", action="store_true",
                    help="also the same cosines on the calibration samples (the data the files were built on)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    model_path = os.path.join(args.case, "model.onnx")
    if not os.path.exists(model_path):
        sys.exit(f"int8_baseline: {model_path} does not exist")
    if args.engine == "ort" and not os.path.exists(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        sys.exit("int8_baseline: onnxruntime-node is not installed in bench/node_modules; run "
                 "`npm install --ignore-scripts onnxruntime-node@1.30.0` in bench/")
    os.makedirs(args.work, exist_ok=True)
    model = onnx.load(model_path)
    out_names = [o.name for o in model.graph.output]
    calib_files, held_files = make_data(args.case, model, args.work, args.samples, args.heldout, args.seed)

    base_path = os.path.join(args.work, "baseline.onnx")
    ranges = collect_ranges(args, model, model_path, calib_files, args.work)
    qdq, nweights, skipped = build_baseline(model, ranges)
    onnx.save(model, base_path)
    print(f"baseline: {qdq} activation Q/DQ pairs, {nweights} int8 weights, {len(skipped)} tensors left float "
          f"(inf/NaN on the calibration data){': ' + ', '.join(skipped) if skipped else ''}", flush=True)

    ref_engine = "ort" if args.engine == "ort" else "ferry-ref"
    files = {f"baseline ({ref_engine})": (ref_engine, base_path)}
    if not args.no_ferry:
        fpath = args.ferry_file or os.path.join(args.work, "ferry.int8.onnx")
        if not args.ferry_file:
            log = sh([args.ferry, "quantize", model_path, "--calibration", os.path.join(args.work, "data", "calib.npz"),
                      "--out", fpath, "-t", str(args.threads)] + args.ferry_arg)
            with open(os.path.join(args.work, "ferry_quantize.log"), "w") as f:
                f.write(log)
        files["ferry (ferry)"] = ("ferry", fpath)
        if args.engine == "ort":
            files["ferry (ORT)"] = ("ort", fpath)
    def measure(samples):
        cos = {k: [] for k in files}
        for feeds in samples:
            ref = load_outputs(run_engine(args, ref_engine, model_path, feeds, os.path.join(args.work, "out_fp32")),
                               out_names)
            for label, (engine, path) in files.items():
                od = os.path.join(args.work, "out_q")
                run_engine(args, engine, path, feeds, od)
                got = load_outputs(od, out_names)
                cos[label].append(min(cosine(got[n], ref[n]) for n in out_names))
        return cos

    cos = measure(held_files)
    result = {"case": os.path.basename(os.path.normpath(args.case)), "samples": args.samples,
              "heldout": args.heldout, "seed": args.seed, "ferry_args": args.ferry_arg,
              "mean_cosine": {k: float(np.mean(v)) for k, v in cos.items()}, "per_sample": cos}
    for k, v in cos.items():
        print(f"{result['case']}: {k:16s} held-out mean cosine {np.mean(v):.5f} (min {np.min(v):.5f})")
    if args.calibration_cosine:
        cc = measure(calib_files)
        result["calibration_mean_cosine"] = {k: float(np.mean(v)) for k, v in cc.items()}
        result["calibration_per_sample"] = cc
        for k, v in cc.items():
            print(f"{result['case']}: {k:16s} calibration mean cosine {np.mean(v):.5f} (min {np.min(v):.5f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

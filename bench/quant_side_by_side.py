#!/usr/bin/python3
"""ferry int8 vs ONNX Runtime int8 on the same QDQ file, and each against its own fp32, interleaved.

    /usr/bin/python3 bench/quant_side_by_side.py --fp32 M.onnx --int8 M.int8.onnx --input NAME=FILE.npy
        [--ferry build/ferry] [--threads 1] [--rounds 5] [--duration 3] [--json OUT.json]

The QDQ file is any standard one (`ferry quantize M.onnx --calibration DATA --out M.int8.onnx`, ONNX
Runtime's quantize_static). ONNX Runtime 1.30 runs through bench/ort_bench.js (install it with
bench/run_bench.sh, or `npm install --ignore-scripts onnxruntime-node@1.30.0` in bench/). Each round
runs the four engines back to back in a rotated order (ferry int8, ORT int8, ferry fp32, ORT fp32),
`--duration` seconds each, and records every p50 and the load average (the machine is shared: the
ratios within a round are what to read, their median over the rounds is reported). Outputs of the
last round are compared: cosine of each int8 output to ferry's fp32 output, and ferry int8 to ORT int8.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_json(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"quant_side_by_side: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def load_avg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def engine_cmd(args, engine, model, out_dir):
    if engine == "ferry":
        cmd = [args.ferry, "bench", model, "--json", "-t", str(args.threads), "--duration", str(args.duration)]
        for i in args.input:
            cmd += ["--input", i]
        return cmd + (["--output-dir", out_dir] if out_dir else [])
    cmd = ["node", os.path.join(HERE, "ort_bench.js"), "--model", model, "--threads", str(args.threads),
           "--duration", str(args.duration)]
    for i in args.input:
        cmd += ["--input", i]
    return cmd + (["--output-dir", out_dir] if out_dir else [])


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-300))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", required=True, help="the float model")
    ap.add_argument("--int8", required=True, help="its QDQ model")
    ap.add_argument("--input", action="append", required=True, help="NAME=FILE.npy (repeat per input)")
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    for path in (args.fp32, args.int8, args.ferry):
        if not os.path.exists(path):
            sys.exit(f"quant_side_by_side: {path} does not exist")
    if not os.path.exists(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        sys.exit("quant_side_by_side: onnxruntime-node is not installed in bench/node_modules; run "
                 "`npm install --ignore-scripts onnxruntime-node@1.30.0` in bench/ (or bench/run_bench.sh)")

    runs = [("ferry", "int8", args.int8), ("ort", "int8", args.int8), ("ferry", "fp32", args.fp32),
            ("ort", "fp32", args.fp32)]
    rounds = []
    outs = tempfile.mkdtemp(prefix="quant_sbs_")
    for r in range(args.rounds):
        order = runs[r % 4:] + runs[:r % 4]
        row = {"load_before": load_avg()}
        for engine, kind, model in order:
            out_dir = os.path.join(outs, f"{engine}_{kind}") if r == args.rounds - 1 else None
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
            j = run_json(engine_cmd(args, engine, model, out_dir))
            row[f"{engine}_{kind}"] = j["latency_ms"]["p50"]
        row["load_after"] = load_avg()
        rounds.append(row)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)

    def ratios(num, den):
        return [x[num] / x[den] for x in rounds]

    summary = {
        "ferry_int8 / ort_int8": ratios("ferry_int8", "ort_int8"),
        "ferry_int8 / ferry_fp32": ratios("ferry_int8", "ferry_fp32"),
        "ort_int8 / ort_fp32": ratios("ort_int8", "ort_fp32"),
    }
    print(f"\n{args.threads} thread(s), {args.rounds} rounds of {args.duration} s per engine; p50 in ms")
    print("| round | load | ferry int8 | ORT int8 | ferry fp32 | ORT fp32 | ferry int8 / ORT int8 | ferry int8 / ferry fp32 |")
    print("|---|---|---|---|---|---|---|---|")
    for i, x in enumerate(rounds):
        print(f"| {i + 1} | {x['load_before']:.1f}-{x['load_after']:.1f} | {x['ferry_int8']:.1f} | {x['ort_int8']:.1f} | "
              f"{x['ferry_fp32']:.1f} | {x['ort_fp32']:.1f} | {x['ferry_int8'] / x['ort_int8']:.2f} | "
              f"{x['ferry_int8'] / x['ferry_fp32']:.2f} |")
    for k, v in summary.items():
        print(f"median {k}: {statistics.median(v):.3f} (rounds: {', '.join(f'{x:.2f}' for x in v)})")

    acc = {}
    ref_dir = os.path.join(outs, "ferry_fp32")
    for name in sorted(os.listdir(ref_dir)):
        ref = np.load(os.path.join(ref_dir, name))
        for engine in ("ferry_int8", "ort_int8", "ort_fp32"):
            path = os.path.join(outs, engine, name)
            if os.path.exists(path):
                acc[f"{name}: {engine} vs ferry_fp32"] = cosine(np.load(path), ref)
        a, b = os.path.join(outs, "ferry_int8", name), os.path.join(outs, "ort_int8", name)
        if os.path.exists(a) and os.path.exists(b):
            acc[f"{name}: ferry_int8 vs ort_int8"] = cosine(np.load(a), np.load(b))
    for k, v in acc.items():
        print(f"cosine {k}: {v:.5f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": rounds, "ratios": summary, "cosine": acc}, f, indent=1)


if __name__ == "__main__":
    main()

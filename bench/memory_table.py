#!/usr/bin/python3
"""The memory table of docs/performance.md (issue 40): per model, the ONNX file, peak RSS of one
`ferry run` at 1 thread from the .onnx and from the .ferry file, ONNX Runtime 1.30 (onnxruntime-node,
bench/ort_bench.js: one session, one run; its figure includes node's own ~40-50 MiB), and the
.ferry file's size (`ferry compile --device cpu`, pre-packed weights). Peak RSS is each child's own
ru_maxrss (wait4), as /usr/bin/time -v reports it.

    bench/memory_table.py --ferry build/ferry --zoo DIR [--cases resnet50_op17,...] [--work DIR] [--no-ort]

DIR holds zoo cases (tests/zoo/gen_zoo.py --out DIR --only <case>,...): model.onnx, input_<i>.npy,
meta.json. Prints a markdown table.
"""
import argparse
import json
import os
import subprocess
import sys

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss(cmd):
    """(exit code, peak RSS bytes) of cmd, output discarded."""
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--cases", default="resnet50_op17,efficientnet_b0_op17,vit_b_16_op17,bert_encoder_op17")
    ap.add_argument("--work", default="/tmp/ferry_memory_table")
    ap.add_argument("--no-ort", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ferry = os.path.abspath(a.ferry)
    rows = ["| model | ONNX file | ferry run | ferry run on the .ferry | ONNX Runtime | .ferry file |",
            "|---|---:|---:|---:|---:|---:|"]
    for case in a.cases.split(","):
        d = os.path.join(a.zoo, case)
        meta = json.load(open(os.path.join(d, "meta.json")))
        model = os.path.join(d, "model.onnx")
        feeds = [f"{n}={os.path.join(d, f'input_{i}.npy')}" for i, n in enumerate(meta["inputs"])]
        compiled = os.path.join(a.work, case + ".ferry")
        r = subprocess.run([ferry, "compile", model, "-o", compiled, "--device", "cpu"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{case}: ferry compile failed: {r.stderr}")
        figures = []
        for m in (model, compiled):
            cmd = [ferry, "run", m, "--threads", "1", "--output-dir", os.path.join(a.work, "out")]
            for f in feeds:
                cmd += ["--input", f]
            code, rss = peak_rss(cmd)
            if code != 0:
                sys.exit(f"{case}: {' '.join(cmd)} exited {code}")
            figures.append(rss)
        if a.no_ort:
            ort = "-"
        else:
            cmd = ["node", os.path.join(HERE, "ort_bench.js"), "--model", model, "--threads", "1", "--warmup", "1",
                   "--iterations", "1"]
            for f in feeds:
                cmd += ["--input", f]
            code, rss = peak_rss(cmd)
            ort = f"{rss / MiB:.0f} MiB" if code == 0 else f"failed ({code})"
        onnx_bytes, ferry_bytes = os.path.getsize(model), os.path.getsize(compiled)
        rows.append(f"| {case} | {onnx_bytes / MiB:.0f} MiB | {figures[0] / MiB:.0f} MiB | {figures[1] / MiB:.0f} MiB | "
                    f"{ort} | {ferry_bytes / MiB:.0f} MiB ({ferry_bytes / onnx_bytes:.2f}x) |")
        print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()

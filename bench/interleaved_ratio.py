#!/usr/bin/python3
"""One process, two sessions, run by turns: ferry int8 p50 over ferry fp32 p50 on a host whose speed drifts.

    PYTHONPATH=build/python /usr/bin/python3 bench/interleaved_ratio.py --fp32 M.onnx --int8 M.int8.onnx
        --input input=X.npy [--threads 1] [--seconds 20]

`ferry bench` runs one file for a second or more at a time. On a host that alternates slow and fast
phases lasting from a tenth of a second to seconds (a shared VM: the same file at 1 thread reads 4.8 ms
in one second and 6.6 ms in the next, idle otherwise), two such runs see different phases and their
ratio swings by 20% or more. Here the two sessions take short turns (--block timed runs, after
--block-warmup untimed ones: run by run, each file would start on caches the other's weights
flushed, which `ferry bench` and ONNX Runtime's loop never do), so both see the same phases in the
same proportion: each file's p50 (and p10, p90) over the whole window, and their ratio. Each run
is timed around session.run (the Python binding's call included: about the same absolute cost for both
files, so it moves the ratio towards 1, never below its true value).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", required=True, help="the float model")
    ap.add_argument("--int8", required=True, help="its int8 file (ferry quantize's output)")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy (repeat per input)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0, help="timed window, both files together")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs of each file first")
    ap.add_argument("--block", type=int, default=8, help="timed runs per turn")
    ap.add_argument("--block-warmup", type=int, default=2, help="untimed runs opening each turn")
    a = ap.parse_args()
    try:
        import ferry
    except ImportError as e:
        sys.exit(f"cannot import ferry ({e}): build it (`make python`) and set PYTHONPATH=build/python")
    feeds = {}
    for spec in a.input:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"--input {spec}: expected NAME=FILE.npy")
        feeds[name] = np.load(path)
    opts = ferry.SessionOptions()
    opts.intra_op_num_threads = a.threads
    sessions = {kind: ferry.InferenceSession(path, opts) for kind, path in (("int8", a.int8), ("fp32", a.fp32))}
    for kind, s in sessions.items():
        missing = [i.name for i in s.get_inputs() if i.name not in feeds]
        if missing:
            ap.error(f"--{kind}: no --input for {', '.join(missing)}")
        for _ in range(a.warmup):
            s.run(None, feeds)
    times = {"int8": [], "fp32": []}
    order = ["int8", "fp32"]
    end = time.perf_counter() + a.seconds
    turn = 0
    while time.perf_counter() < end:
        for kind in order if turn % 2 == 0 else order[::-1]:
            for _ in range(a.block_warmup):
                sessions[kind].run(None, feeds)
            for _ in range(a.block):
                t0 = time.perf_counter()
                sessions[kind].run(None, feeds)
                times[kind].append((time.perf_counter() - t0) * 1e3)
        turn += 1

    def q(xs, p):
        return statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else xs[0]

    for kind in order:
        xs = times[kind]
        print(f"{kind}: {len(xs)} runs, p10 {q(xs, 10):.3f} ms, p50 {statistics.median(xs):.3f} ms, p90 {q(xs, 90):.3f} ms")
    i8, f32 = times["int8"], times["fp32"]
    print(f"int8 / fp32 at {a.threads} thread(s): p50 {statistics.median(i8) / statistics.median(f32):.3f}, "
          f"p10 {q(i8, 10) / q(f32, 10):.3f} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()

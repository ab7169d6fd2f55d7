#!/usr/bin/env python3
"""The Python package's costs (docs/python.md, issue 36):

1. overhead per InferenceSession.run() over the C++ Session::run it calls: rounds alternate
   `runs` Python run() calls and `runs` C++ calls (the same feed, converted once, timed inside
   the extension without the GIL); overhead = median per-call time of Python - of C++.
2. two threads calling run() on one session (intra_op_num_threads=1) against the same runs one
   after the other in one thread: the ratio of wall times (1.0: no overlap, 0.5: perfect).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--model demo/digits_cnn.onnx]
Prints the figures and the load (uptime); timings on a loaded machine are noisy, so each is a
median over --rounds alternated rounds.
"""
import argparse
import os
import statistics
import threading
import time

import numpy as np

import ferry as ort

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "demo", "digits_cnn.onnx"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--overlap-runs", type=int, default=100)
    args = ap.parse_args()

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(args.model, so)
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else args.batch for d in i.shape]
        feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    for _ in range(20):
        sess.run(None, feed)
    sess._sess._bench_native(feed, 20)

    # Wall time per call (median of the round's calls) and the calling thread's CPU time per call
    # (the round's total / runs): with one intra-op thread the whole run executes on the calling
    # thread, so CPU time measures the overhead even when other work on the machine stretches wall time.
    py_med, cpp_med, py_cpu, cpp_cpu = [], [], [], []
    for _ in range(args.rounds):
        c0 = time.thread_time()
        cpp = sess._sess._bench_native(feed, args.runs)
        cpp_cpu.append((time.thread_time() - c0) / args.runs)
        py = []
        c0 = time.thread_time()
        for _ in range(args.runs):
            t0 = time.perf_counter()
            sess.run(None, feed)
            py.append(time.perf_counter() - t0)
        py_cpu.append((time.thread_time() - c0) / args.runs)
        py_med.append(statistics.median(py))
        cpp_med.append(statistics.median(cpp))
    overhead = [(p - c) * 1e6 for p, c in zip(py_med, cpp_med)]
    overhead_cpu = [(p - c) * 1e6 for p, c in zip(py_cpu, cpp_cpu)]
    print(f"model {os.path.basename(args.model)} batch {args.batch}, 1 intra-op thread, {args.rounds} rounds of "
          f"{args.runs} calls; load: {os.getloadavg()}")
    print(f"wall per call: python run() {statistics.median(py_med) * 1e6:.1f} us, C++ Session::run "
          f"{statistics.median(cpp_med) * 1e6:.1f} us; overhead per round (us): "
          f"{', '.join(f'{o:.1f}' for o in overhead)}; median {statistics.median(overhead):.1f} us")
    print(f"CPU per call:  python run() {statistics.median(py_cpu) * 1e6:.1f} us, C++ Session::run "
          f"{statistics.median(cpp_cpu) * 1e6:.1f} us; overhead per round (us): "
          f"{', '.join(f'{o:.1f}' for o in overhead_cpu)}; median {statistics.median(overhead_cpu):.1f} us")

    # Wall time of two threads against the same runs in one thread, and the process CPU time of
    # each phase: CPU equal in both (ratio ~1) says the threads add no work (no spinning, no lock
    # convoys), so a wall ratio above 0.5 is then the cores the machine had free.
    n = args.overlap_runs
    ratios, cpu_ratios = [], []
    for _ in range(args.rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            sess.run(None, feed)
        serial, serial_cpu = time.perf_counter() - t0, time.process_time() - c0

        def work():
            for _ in range(n // 2):
                sess.run(None, feed)

        threads = [threading.Thread(target=work) for _ in range(2)]
        c0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        both, both_cpu = time.perf_counter() - t0, time.process_time() - c0
        ratios.append(both / serial)
        cpu_ratios.append(both_cpu / serial_cpu)
    print(f"two threads, {n} runs: wall time / serial wall time per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f}x; process CPU time / serial CPU time: "
          f"{', '.join(f'{r:.2f}' for r in cpu_ratios)}; median {statistics.median(cpu_ratios):.2f}x; "
          f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()

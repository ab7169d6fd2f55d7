#!/usr/bin/env python3
"""The Python package's costs (docs/python.md, issue 36):

1. overhead per InferenceSession.run() over the C++ Session::run it calls: rounds alternate
   `runs` Python run() calls and `runs` C++ calls (the same feed, converted once, timed inside
   the extension without the GIL); overhead = median per-call time of Python - of C++.
2. two threads calling run() on one session (intra_op_num_threads=1) against the same runs one
   after the other in one thread: the ratio of wall times (1.0: no overlap, 0.5: perfect), beside
   the same ratio for the C++ call alone and for a lock-free control (what the machine allows).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--model demo/digits_cnn.onnx]
Prints the figures and the load (uptime); timings on a loaded machine are noisy, so each is a
median over --rounds alternated rounds.
"""
import argparse
import hashlib
import os
import resource
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
    ap.add_argument("--overlap-runs", type=int, default=400)
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

    # Two threads against the same work in one thread, three kinds of work alternated in every
    # round: the machine (a control that needs no lock and no GIL: hashlib's sha256 of a buffer
    # sized to take about one run, which releases the GIL), the C++ Session::run alone (two Python
    # threads each in _bench_native, which holds no GIL), and InferenceSession.run(). On a machine
    # that gives the process two cores the control is ~0.5x; when other work takes a core it is
    # ~1.0x, and the session's ratios can be no better: compare them with it, round by round.
    n = args.overlap_runs
    per_run = statistics.median(cpp_med)
    block = b"x" * 65536
    t0 = time.perf_counter()
    for _ in range(50):
        hashlib.sha256(block).digest()
    reps = max(1, round(per_run / ((time.perf_counter() - t0) / 50)))
    data = block * reps

    def control(k):
        for _ in range(k):
            hashlib.sha256(data).digest()

    def native(k):
        sess._sess._bench_native(feed, k)

    def python(k):
        for _ in range(k):
            sess.run(None, feed)

    def pair(fn):
        """(two threads' wall / serial wall, two threads' process CPU / serial CPU, the two threads'
        voluntary context switches per run: how often a run waited for something, a lock or the
        GIL, whatever the machine's load)"""
        c0, t0 = time.process_time(), time.perf_counter()
        fn(n)
        serial, serial_cpu = time.perf_counter() - t0, time.process_time() - c0
        waits = []

        def counted(k):
            v0 = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
            fn(k)
            waits.append(resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - v0)

        threads = [threading.Thread(target=counted, args=(n // 2,)) for _ in range(2)]
        c0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return (time.perf_counter() - t0) / serial, (time.process_time() - c0) / serial_cpu, sum(waits) / n

    kinds = {"control (sha256, no GIL)": control, "C++ Session::run": native, "python run()": python}
    res = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for k, fn in kinds.items():
            res[k].append(pair(fn))
    print(f"two threads / one thread, {n} runs, {args.rounds} rounds (wall; process CPU):")
    for k, rs in res.items():
        walls = [r[0] for r in rs]
        cpus = [r[1] for r in rs]
        waits = [r[2] for r in rs]
        print(f"  {k:26s} wall {' '.join(f'{w:.2f}' for w in walls)}; median {statistics.median(walls):.2f}x, "
              f"best {min(walls):.2f}x; CPU median {statistics.median(cpus):.2f}x; "
              f"waits per run median {statistics.median(waits):.3f}")
    rel = [p[0] / c[0] for p, c in zip(res["python run()"], res["control (sha256, no GIL)"])]
    print(f"  python run() wall ratio / the control's, per round: {' '.join(f'{r:.2f}' for r in rel)}; "
          f"median {statistics.median(rel):.2f} (1.0: overlaps as well as the machine allows)")
    if statistics.median(w for w, _, _ in res["control (sha256, no GIL)"]) > 0.8:
        print("  the control did not overlap: the machine gave this process about one core (other work, or the "
              "kernel's autogroup sharing CPU between sessions, not threads); the ratios above say nothing about "
              "the session. docs/python.md runs the bench in a weighted group: setsid bash -c "
              "'echo -19 > /proc/self/autogroup; exec /usr/bin/python3 bench/python_overhead.py'")
    print(f"load: {os.getloadavg()}")

if __name__ == "__main__":
    main()

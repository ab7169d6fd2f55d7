#!/usr/bin/python3
"""`ferry serve` overhead, measured against in-process `ferry bench` on the same
threads (docs/serving.md). Starts a server on a free 127.0.0.1 port, runs `ferry perf`, stops it.

  bench/serve_overhead.py FERRY [--model demo/digits_cnn.onnx] [--threads 1] [--seconds 2]
      [--grpc-floor /tmp/grpc_floor_probe] [--io-spin-microseconds 0,200] [--rounds 2]

Prints: in-process p50 (ferry bench, batch 1), served p50 over HTTP (binary and JSON tensors), gRPC
(ModelInfer calls) and a gRPC stream (ferry perf --streaming: ModelStreamInfer) at concurrency 1, and
their differences. --io-spin-microseconds: the servers' and clients' spin budgets
to compare (comma-separated; each round serves once per value, alternated; default: ferry's own). The batching target is bench/serve_batching.py.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

ap = argparse.ArgumentParser()
ap.add_argument("ferry")
ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "demo", "digits_cnn.onnx"))
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--seconds", type=float, default=2.0)
ap.add_argument("--io-spin-microseconds", default="", help="comma-separated budgets to alternate (default: ferry's)")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--grpc-floor", help="bench/grpc_floor_probe.cpp built: also the empty-RPC round trip")
a = ap.parse_args()


def bench(model, batch):
    out = subprocess.run([a.ferry, "bench", model, "--threads", str(a.threads), "--batch", str(batch), "--duration",
                          str(a.seconds * 2), "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def serve(repo, fn, spin):
    p = subprocess.Popen([a.ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                          "--grpc-port", "0", "--metrics-port", "0", "--threads", str(a.threads)] + spin,
                         stderr=subprocess.PIPE, text=True)
    port = grpc_port = None
    for line in p.stderr:
        m = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", line)
        if m:
            grpc_port = int(m.group(1))
        m = re.search(r"HTTP on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    try:
        return fn("127.0.0.1:%d" % port, "127.0.0.1:%d" % grpc_port)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)


def perf(url, model, concurrency, spin, *extra):
    out = os.path.join(tmp, "perf.json")
    subprocess.run([a.ferry, "perf", url, "-m", model, "--concurrency-range", str(concurrency), "-p",
                    str(int(a.seconds * 1000)), "--json", out, *spin, *extra], check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out))[0]


tmp = tempfile.mkdtemp()
try:
    load = open("/proc/loadavg").read().split()[:3]
    print("load average %s, %d threads, model %s" % (" ".join(load), a.threads, os.path.basename(a.model)))
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "m", "1"))
    shutil.copy(a.model, os.path.join(repo, "m", "1", "model.onnx"))
    with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 0\n")  # requests carry the model's own shapes (batch 1)
    # Alternated: in-process, served, in-process, served (the machine is shared and noisy).
    spins = [["--io-spin-microseconds", v.strip()] for v in a.io_spin_microseconds.split(",")] if a.io_spin_microseconds else [[]]
    for rnd in range(a.rounds):
        b = bench(a.model, 1)
        inproc = b["latency_ms"]["p50"] * 1000
        for spin in spins:
            res = serve(repo, lambda url, gurl: (perf(url, "m", 1, spin), perf(url, "m", 1, spin, "--json-data"),
                                                 perf(gurl, "m", 1, spin, "--protocol", "grpc"),
                                                 perf(gurl, "m", 1, spin, "--protocol", "grpc", "--streaming"),
                                                 subprocess.run([a.grpc_floor, gurl], capture_output=True, text=True,
                                                                check=True).stdout.strip() if a.grpc_floor else ""), spin)
            print("round %d%s: in-process p50 %.0f us | HTTP binary p50 %.0f us (+%.0f) | HTTP JSON p50 %.0f us (+%.0f) | "
                  "gRPC p50 %.0f us (+%.0f) | gRPC stream p50 %.0f us (+%.0f)"
                  % (rnd + 1, " spin %s us" % spin[1] if spin else "", inproc, res[0]["p50_us"], res[0]["p50_us"] - inproc,
                     res[1]["p50_us"], res[1]["p50_us"] - inproc, res[2]["p50_us"], res[2]["p50_us"] - inproc,
                     res[3]["p50_us"], res[3]["p50_us"] - inproc), flush=True)
            if res[4]:
                print("  " + res[4].replace("\n", "\n  "))
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

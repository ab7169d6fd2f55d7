#!/usr/bin/python3
"""CPU time per request of `ferry perf` (the client) and `ferry serve` (the server) at concurrency 1,
in the steady state, to show where a served request's time goes (docs/serving.md "Measured").

  bench/serve_cpu_per_call.py FERRY [FERRY2 ...] [--model demo/digits_cnn.onnx] [--threads 1]
      [--protocol grpc|http] [--streaming] [--io-spin-microseconds 0] [--rounds 2]

Each round serves the model (as m/1/model.onnx, max_batch_size 0) from each FERRY build in turn
(alternated: A/B on a shared machine) and runs `ferry perf` against it; over 2.5 s in the middle of
the run it reads both processes' CPU time (/proc/PID/task/*/schedstat, all threads) and the server's
request count (statistics endpoint). Spin 0 (the default here) so that the CPU is the work, not
polling. Prints p50/p90 of the run, requests/s, client and server CPU per request, and the server's
own compute time per request (its statistics).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("ferry", nargs="+")
ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "demo", "digits_cnn.onnx"))
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--protocol", default="grpc", choices=["grpc", "http"])
ap.add_argument("--streaming", action="store_true", help="gRPC: ferry perf --streaming (ModelStreamInfer)")
ap.add_argument("--io-spin-microseconds", default="0")
ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args()


def cpu_ns(pid):
    total = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


def one(ferry, repo, tmp):
    spin = ["--io-spin-microseconds", a.io_spin_microseconds]
    srv = subprocess.Popen([ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port",
                            "0", "--metrics-port", "0", "--threads", str(a.threads)] + spin, stderr=subprocess.PIPE, text=True)
    ports = {}
    for line in srv.stderr:
        for proto in ("gRPC", "HTTP"):
            m = re.search(proto + r" on 127\.0\.0\.1:(\d+)", line)
            if m:
                ports[proto] = int(m.group(1))
        if "HTTP" in ports:
            break
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    try:
        def served():
            with urllib.request.urlopen("http://127.0.0.1:%d/v2/models/m/stats" % ports["HTTP"], timeout=10) as f:
                return json.load(f)["model_stats"][0]["inference_stats"]["success"]["count"]
        out = os.path.join(tmp, "perf.json")
        url = "127.0.0.1:%d" % ports["gRPC" if a.protocol == "grpc" else "HTTP"]
        cli = subprocess.Popen([ferry, "perf", url, "-m", "m", "--protocol", a.protocol, "--concurrency-range", "1", "-p", "1500",
                                "--max-trials", "3", "--json", out] + spin + (["--streaming"] if a.streaming else []), stdout=subprocess.DEVNULL)
        time.sleep(1.2)  # past the start and the warm-up
        t0 = (cpu_ns(cli.pid), cpu_ns(srv.pid), served(), time.time())
        time.sleep(2.5)
        t1 = (cpu_ns(cli.pid), cpu_ns(srv.pid), served(), time.time())
        if cli.wait(120) != 0:
            raise SystemExit("ferry perf failed")
        n = t1[2] - t0[2]
        r = json.load(open(out))[0]
        return ("p50 %4.0f us p90 %5.0f us | %5.0f requests/s | client %5.1f us CPU a request | server %5.1f us CPU a request "
                "(its compute %3.0f us)" % (r["p50_us"], r["p90_us"], n / (t1[3] - t0[3]), (t1[0] - t0[0]) / n / 1e3,
                                             (t1[1] - t0[1]) / n / 1e3, r["server_compute_infer_us"]))
    finally:
        srv.terminate()
        srv.wait(60)


tmp = tempfile.mkdtemp()
try:
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "m", "1"))
    shutil.copy(a.model, os.path.join(repo, "m", "1", "model.onnx"))
    with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 0\n")
    print("load average %s, %s%s, spin %s us, %d threads, model %s" % (" ".join(open("/proc/loadavg").read().split()[:3]), a.protocol,
          " --streaming" if a.streaming else "", a.io_spin_microseconds, a.threads, os.path.basename(a.model)))
    for rnd in range(a.rounds):
        for ferry in a.ferry:
            print("round %d %-24s %s" % (rnd + 1, ferry, one(ferry, repo, tmp)), flush=True)
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

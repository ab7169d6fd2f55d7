#!/usr/bin/python3
"""Soak test of `ferry serve` (docs/serving.md): --seconds of `ferry perf` at --connections concurrent
kept-alive connections against one model with dynamic batching, while the server's resident
memory and open descriptors are sampled every second from /proc. Bounded: perf runs a half-window
warm-up then exactly --seconds of windows; everything has a timeout.

  bench/serve_soak.py FERRY [--model demo/digits_cnn.onnx] [--seconds 60] [--connections 64]
      [--protocol http|grpc] [--threads 1] [--max-queue-size 0]

Prints: requests and inferences/s, failed requests by reason from the server's metrics (REJECTED is
an explicit overload rejection, anything else is a failure), RSS after warm-up / at the end / the
largest, descriptors after a short first run at the same concurrency (the reactors the server makes once)
/ at the peak / after the clients closed, and the load average.
Exit 1 when a request failed for any other reason than REJECTED, RSS grew by more than 10% after
warm-up, or descriptors after the run exceed those before it.
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
import time
import urllib.request

import onnx

ap = argparse.ArgumentParser()
ap.add_argument("ferry")
ap.add_argument("--model", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo", "digits_cnn.onnx"))
ap.add_argument("--seconds", type=int, default=60)
ap.add_argument("--connections", type=int, default=64)
ap.add_argument("--protocol", default="http", choices=["http", "grpc"])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--max-queue-size", type=int, default=0, help="dynamic_batching.default_queue_policy.max_queue_size (0: unbounded)")
a = ap.parse_args()

WINDOWS = 6
tmp = tempfile.mkdtemp()


def proc_rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


try:
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "m", "1"))
    m = onnx.load(a.model)
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim
        if len(d):
            d[0].Clear()
            d[0].dim_param = "N"
    del m.graph.value_info[:]
    onnx.save(m, os.path.join(repo, "m", "1", "model.onnx"))
    with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 16\ndynamic_batching { max_queue_delay_microseconds: 500 default_queue_policy { max_queue_size: %d } }\n"
                % a.max_queue_size)
    p = subprocess.Popen([a.ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                          "--grpc-port", "0", "--metrics-port", "0", "--threads", str(a.threads)], stderr=subprocess.PIPE, text=True)
    port = grpc_port = metrics_port = None
    for line in p.stderr:
        g = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", line)
        if g:
            grpc_port = int(g.group(1))
        g = re.search(r"HTTP on 127\.0\.0\.1:(\d+), metrics on 127\.0\.0\.1:(\d+)", line)
        if g:
            port, metrics_port = int(g.group(1)), int(g.group(2))
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    ok = True
    try:
        print("load average %s; %s, %d connections over %s, %d s; server pid %d, %d compute thread(s)"
              % (loadavg(), os.path.basename(a.model), a.connections, a.protocol, a.seconds, p.pid, a.threads), flush=True)
        time.sleep(0.5)
        rss_start = proc_rss_kb(p.pid)
        out = os.path.join(tmp, "perf.json")
        url = "127.0.0.1:%d" % (port if a.protocol == "http" else grpc_port)
        # A short run at the same concurrency first: the server makes some of its I/O contexts' reactors
        # (an eventpoll, eventfd and timerfd each) on their first connections, once (measured: 20 -> 38
        # descriptors after the first load, 38 after each of the next two). The leak check counts
        # from after it, so a descriptor that stays per run is what fails.
        subprocess.run([a.ferry, "perf", url, "-m", "m", "--protocol", a.protocol, "--concurrency-range", str(a.connections),
                        "-p", "300", "--max-trials", "3", "-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        time.sleep(1.0)
        fds_before = proc_fds(p.pid)
        samples = []  # (seconds since start, rss kB, fds)
        window_ms = a.seconds * 1000 // WINDOWS
        perf = subprocess.Popen([a.ferry, "perf", url, "-m", "m", "--protocol", a.protocol, "--concurrency-range", str(a.connections),
                                 "-p", str(window_ms), "--max-trials", str(WINDOWS), "-s", "0", "--json", out],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        while perf.poll() is None and time.time() - t0 < a.seconds * 2 + 60:
            samples.append((time.time() - t0, proc_rss_kb(p.pid), proc_fds(p.pid)))
            time.sleep(1)
        if perf.poll() is None:
            perf.kill()
            print("ferry perf did not finish in time")
            ok = False
        perf_out = perf.communicate()[0]
        time.sleep(1.0)  # the clients' connections close
        fds_after = proc_fds(p.pid)
        rss_end = proc_rss_kb(p.pid)
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=30).read().decode()
        fails = {r: int(float(v)) for r, v in re.findall(r'ferry_inference_request_failure\{model="m",version="1",reason="(\w+)"\} (\S+)', metrics)}
        success = int(float(re.search(r'ferry_inference_request_success\{model="m",version="1"\} (\S+)', metrics).group(1)))
        count = float(re.search(r'ferry_inference_count\{model="m",version="1"\} (\S+)', metrics).group(1))
        execs = float(re.search(r'ferry_inference_exec_count\{model="m",version="1"\} (\S+)', metrics).group(1))
        res = json.load(open(out))[0] if os.path.exists(out) else {}
        warm = a.seconds / WINDOWS / 2 + a.seconds / WINDOWS  # the warm-up and the first window
        after_warm = [s for s in samples if s[0] >= warm]
        rss_warm = after_warm[0][1] if after_warm else rss_start
        rss_max = max([s[1] for s in after_warm] or [rss_end])
        growth = (rss_end - rss_warm) / rss_warm if rss_warm else 0.0
        print("requests: %d succeeded, failed by reason %s; %.0f infer/s over the last 3 windows, p50 %.2f ms, p99 %.2f ms; "
              "average batch %.2f" % (success, fails, res.get("throughput", 0), res.get("p50_us", 0) / 1000, res.get("p99_us", 0) / 1000,
                                      count / execs if execs else 0))
        print("RSS: %.1f MB at start, %.1f MB after warm-up (%.0f s), %.1f MB at the end (%+.1f%%), largest %.1f MB"
              % (rss_start / 1024, rss_warm / 1024, warm, rss_end / 1024, growth * 100, rss_max / 1024))
        print("RSS every 10 s (MB): " + " ".join("%.1f" % (s[1] / 1024) for s in samples[::10]))
        print("descriptors: %d before, largest %d during, %d after the clients closed"
              % (fds_before, max([s[2] for s in samples] or [0]), fds_after))
        if perf.returncode != 0:
            print("ferry perf exit %s: %s" % (perf.returncode, perf_out.strip().splitlines()[-3:]))
        if any(v > 0 for r, v in fails.items() if r != "REJECTED"):
            print("FAILED: requests failed for other reasons than overload")
            ok = False
        if growth > 0.10:
            print("FAILED: RSS grew by more than 10% after warm-up")
            ok = False
        if fds_after > fds_before:
            print("FAILED: %d descriptors more after the run" % (fds_after - fds_before))
            ok = False
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        print("server exit %s; load average after: %s" % (p.returncode, loadavg()))
    sys.exit(0 if ok and p.returncode == 0 else 1)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

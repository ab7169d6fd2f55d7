#!/usr/bin/python3
"""The batching target of `ferry serve` (docs/serving.md): a model served with dynamic batching at
--concurrency N against in-process `ferry bench --batch B` on the same compute threads, alternated
(bench, served, bench, served, ...) because the machine is shared. The model's first axis is made
symbolic (a copy; ResNet-50 from the zoo is exported with batch 1) so that both can batch.

  bench/serve_batching.py FERRY MODEL.onnx [--threads 2] [--batch 8] [--concurrency 8] [--rounds 2]
      [--seconds 5] [--delay-us 2000] [--protocol http|grpc]

Prints per round: `ferry bench --batch B` samples/s, served inferences/s at the concurrency and
their ratio, the average batch from the server's own metrics (ferry_inference_count /
ferry_inference_exec_count over the measured span), the server-side queue and compute time per
request (ferry perf's split), and the load average before and after.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.request

import onnx

ap = argparse.ArgumentParser()
ap.add_argument("ferry")
ap.add_argument("model")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--seconds", type=float, default=5.0, help="ferry perf window (three agreeing windows per level)")
ap.add_argument("--delay-us", type=int, default=2000, help="max_queue_delay_microseconds")
ap.add_argument("--protocol", default="http", choices=["http", "grpc"])
a = ap.parse_args()

tmp = tempfile.mkdtemp()


def dynamic_batch_copy(src, dst):
    m = onnx.load(src)
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim
        if len(d):
            d[0].Clear()
            d[0].dim_param = "N"
    del m.graph.value_info[:]  # shapes inferred again from the symbolic input
    onnx.save(m, dst)


def metric(text, name):
    m = re.search(r'^%s\{model="b",version="1"\} (\S+)$' % name, text, re.M)
    return float(m.group(1)) if m else 0.0


def served(repo):
    p = subprocess.Popen([a.ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                          "--grpc-port", "0", "--metrics-port", "0", "--threads", str(a.threads)],
                         stderr=subprocess.PIPE, text=True)
    port = grpc_port = metrics_port = None
    for line in p.stderr:
        m = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", line)
        if m:
            grpc_port = int(m.group(1))
        m = re.search(r"HTTP on 127\.0\.0\.1:(\d+), metrics on 127\.0\.0\.1:(\d+)", line)
        if m:
            port, metrics_port = int(m.group(1)), int(m.group(2))
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    try:
        scrape = lambda: urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=30).read().decode()
        before = scrape()
        out = os.path.join(tmp, "perf.json")
        url = "127.0.0.1:%d" % (port if a.protocol == "http" else grpc_port)
        subprocess.run([a.ferry, "perf", url, "-m", "b", "--protocol", a.protocol, "--concurrency-range", str(a.concurrency),
                        "-p", str(int(a.seconds * 1000)), "--max-trials", "6", "-s", "15", "--json", out],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        after = scrape()
        res = json.load(open(out))[0]
        count = metric(after, "ferry_inference_count") - metric(before, "ferry_inference_count")
        execs = metric(after, "ferry_inference_exec_count") - metric(before, "ferry_inference_exec_count")
        res["metrics_avg_batch"] = count / execs if execs else 0.0
        return res
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(120)


try:
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "b", "1"))
    model = os.path.join(repo, "b", "1", "model.onnx")
    dynamic_batch_copy(a.model, model)
    with open(os.path.join(repo, "b", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: %d\ndynamic_batching { preferred_batch_size: [ %d ] max_queue_delay_microseconds: %d }\n"
                % (a.batch, a.batch, a.delay_us))
    print("load average %s; %d compute threads; %s; batch %d; concurrency %d over %s"
          % (" ".join(open("/proc/loadavg").read().split()[:3]), a.threads, os.path.basename(a.model), a.batch,
             a.concurrency, a.protocol), flush=True)
    ratios = []
    for rnd in range(a.rounds):
        b = json.loads(subprocess.run([a.ferry, "bench", model, "--threads", str(a.threads), "--batch", str(a.batch),
                                       "--duration", str(a.seconds * 3), "--json"], capture_output=True, text=True,
                                      check=True).stdout)
        s = served(repo)
        ratios.append(s["throughput"] / b["samples_per_s"])
        print("round %d: ferry bench --batch %d %.2f samples/s | served %.2f infer/s (%.2fx)%s | average batch %.2f "
              "(metrics: inference_count / exec_count) | server queue %.0f us, compute %.0f us per request | p50 %.0f ms"
              % (rnd + 1, a.batch, b["samples_per_s"], s["throughput"], ratios[-1], "" if s.get("stable", True) else " (not stable)",
                 s["metrics_avg_batch"], s["server_queue_us"], s["server_compute_infer_us"], s["p50_us"] / 1000), flush=True)
    print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

#!/usr/bin/python3
"""What `ferry serve`'s Prometheus metrics cost (docs/serving.md, "Metrics"): throughput and the
server's CPU per request with /metrics on and scraped every --scrape-ms by another process, against
`--allow-metrics false` (no listener, nobody scrapes), on the same model, alternated rounds; and the
server CPU one scrape takes on an idle server.

  bench/serve_metrics.py FERRY [--model demo/digits_cnn.onnx ...] [--concurrency 8] [--threads 1]
      [--rounds 3] [--seconds 2] [--scrape-ms 100] [--scrapes 400]

The per-request counters (queue, compute, success, the latency histogram: src/serve/served_model.cpp)
are the statistics extension's as well and are kept whatever --allow-metrics says; what they cost
alone is bench/serve_stats_probe.cpp's. Each run: `ferry serve` on free 127.0.0.1 ports, `ferry perf
--concurrency-range C` (HTTP, binary tensors), the server's CPU from /proc/PID/stat and its completed
requests from its statistics over the perf run.
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

ap = argparse.ArgumentParser()
ap.add_argument("ferry")
ap.add_argument("--model", action="append", help="ONNX model (repeatable; default demo/digits_cnn.onnx)")
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--threads", type=int, default=1, help="the server's compute threads")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--seconds", type=float, default=2.0, help="ferry perf's window")
ap.add_argument("--scrape-ms", type=int, default=100)
ap.add_argument("--scrapes", type=int, default=400, help="back-to-back scrapes of an idle server (the CPU of one)")
a = ap.parse_args()
models = a.model or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo", "digits_cnn.onnx")]
TICK = os.sysconf("SC_CLK_TCK")

# The scraper: another process, GET /metrics every --scrape-ms until killed; counts its scrapes.
SCRAPER = r"""
import sys, time, urllib.request
url, period, n = sys.argv[1], float(sys.argv[2]) / 1000, 0
next_t = time.time()
while True:
    urllib.request.urlopen(url, timeout=30).read()
    n += 1
    print(n, flush=True)
    next_t += period
    time.sleep(max(0.0, next_t - time.time()))
"""


def cpu_seconds(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime, stime (fields 14, 15)


def successes(url):
    st = json.load(urllib.request.urlopen("http://%s/v2/models/m/stats" % url, timeout=30))
    return sum(m["inference_stats"]["success"]["count"] for m in st["model_stats"])


def serve(repo, metrics, fn, *extra):
    p = subprocess.Popen([a.ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                          "--grpc-port", "0", "--metrics-port", "0", "--threads", str(a.threads), "--allow-metrics", str(metrics).lower(),
                          *extra],
                         stderr=subprocess.PIPE, text=True)
    port = mport = None
    for line in p.stderr:
        m = re.search(r"HTTP on 127\.0\.0\.1:(\d+)(?:, metrics on 127\.0\.0\.1:(\d+))?", line)
        if m:
            port, mport = int(m.group(1)), m.group(2) and int(m.group(2))
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    try:
        return fn(p.pid, "127.0.0.1:%d" % port, mport and "http://127.0.0.1:%d/metrics" % mport)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)


def run(pid, url, metrics_url):
    """ferry perf at --concurrency; the scraper running when metrics_url is given."""
    scraper = None
    if metrics_url:
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, metrics_url, str(a.scrape_ms)], stdout=subprocess.PIPE, text=True)
        scraped = []
        threading.Thread(target=lambda: [scraped.append(line) for line in scraper.stdout], daemon=True).start()
    out = os.path.join(tmp, "perf.json")
    try:
        c0, n0, t0 = cpu_seconds(pid), successes(url), time.time()
        subprocess.run([a.ferry, "perf", url, "-m", "m", "--concurrency-range", str(a.concurrency), "-p", str(int(a.seconds * 1000)),
                        "--max-trials", "3", "--json", out], check=True, stdout=subprocess.DEVNULL)
        c1, n1, t1 = cpu_seconds(pid), successes(url), time.time()
    finally:
        if scraper:
            scraper.kill()
            scraper.wait()
    row = json.load(open(out))[0]
    return {"throughput": row["throughput"], "p50_us": row["p50_us"], "cpu_us_per_request": (c1 - c0) * 1e6 / max(1, n1 - n0),
            "scrapes_per_s": len(scraped) / (t1 - t0) if metrics_url else 0.0}


def idle_scrapes(pid, url, metrics_url):
    """Server CPU per scrape: --scrapes back-to-back GET /metrics on an idle server (after one request)."""
    subprocess.run([a.ferry, "perf", url, "-m", "m", "-p", "200", "--max-trials", "3"], check=True, stdout=subprocess.DEVNULL)
    body = urllib.request.urlopen(metrics_url, timeout=30).read()
    c0, t0 = cpu_seconds(pid), time.time()
    for _ in range(a.scrapes):
        urllib.request.urlopen(metrics_url, timeout=30).read()
    return (cpu_seconds(pid) - c0) * 1e6 / a.scrapes, (time.time() - t0) * 1e6 / a.scrapes, len(body)


tmp = tempfile.mkdtemp()
try:
    print("load average %s, %d cores, server --threads %d, concurrency %d, scrape every %d ms"
          % (" ".join(open("/proc/loadavg").read().split()[:3]), os.cpu_count(), a.threads, a.concurrency, a.scrape_ms), flush=True)
    for model in models:
        repo = os.path.join(tmp, "repo")
        shutil.rmtree(repo, ignore_errors=True)
        os.makedirs(os.path.join(repo, "m", "1"))
        shutil.copy(model, os.path.join(repo, "m", "1", "model.onnx"))
        with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
            f.write("max_batch_size: 0\n")  # requests carry the model's own shapes (batch 1)
        name = os.path.basename(os.path.dirname(model)) if os.path.basename(model) == "model.onnx" else os.path.basename(model)
        # (the I/O thread's spin after each answer, --io-spin-microseconds, burns an idle core's time: with and without)
        for spin in ([], ["--io-spin-microseconds", "0"]):
            cpu_scrape, wall_scrape, size = serve(repo, True, idle_scrapes, *spin)
            print("%s: one scrape (%d bytes, a new connection each) on an idle server%s: %.0f us server CPU, %.0f us round trip"
                  % (name, size, " with --io-spin-microseconds 0" if spin else "", cpu_scrape, wall_scrape), flush=True)
        ratios, cpu_ratios = [], []
        for rnd in range(a.rounds):
            res = {}
            for metrics in ((True, False) if rnd % 2 == 0 else (False, True)):  # alternated: on off, off on, ...
                res[metrics] = serve(repo, metrics, run)
            on, off = res[True], res[False]
            ratios.append(on["throughput"] / off["throughput"])
            cpu_ratios.append(on["cpu_us_per_request"] / off["cpu_us_per_request"])
            print("%s round %d: metrics on + scraped (%.1f/s): %.1f infer/s, p50 %.0f us, server CPU %.0f us/request | "
                  "--allow-metrics false: %.1f infer/s, p50 %.0f us, %.0f us/request | on/off throughput %.3f, CPU/request %.3f"
                  % (name, rnd + 1, on["scrapes_per_s"], on["throughput"], on["p50_us"], on["cpu_us_per_request"], off["throughput"],
                     off["p50_us"], off["cpu_us_per_request"], ratios[-1], cpu_ratios[-1]), flush=True)
        if not ratios:
            continue
        ratios.sort()
        cpu_ratios.sort()
        print("%s: on/off throughput median %.3f (range %.3f-%.3f), server CPU/request median %.3f (range %.3f-%.3f)"
              % (name, ratios[len(ratios) // 2], ratios[0], ratios[-1], cpu_ratios[len(cpu_ratios) // 2], cpu_ratios[0], cpu_ratios[-1]),
              flush=True)
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

#!/usr/bin/python3
"""The memory of `ferry serve`'s instances (docs/performance.md, "A dynamic batch axis too"): a model
served with `instance_group [{count: C}]` and its batch axis made symbolic (a copy; the zoo's
models are exported with batch 1), `ferry perf --concurrency-range 2` at each batch size given (both
instances busy), and the server's VmRSS / VmHWM after the load and after each batch size, for each
server binary in turn, alternated over the rounds (the machine is shared).

  bench/serve_instances_rss.py MODEL.onnx --server NEW --server OLD [--perf FERRY] [--count 2]
      [--threads 2] [--max-batch 8] [--batches 1,4] [--window-ms 3000] [--rounds 2]

Prints one JSON line per server per round: the RSS / peak at each point (MiB), perf's inferences/s
and server compute time per request at each batch, the server's CPU ms per inference over each perf
run (its utime + stime over the batch items its /v2/models/m/stats counted: less sensitive to the
load than wall time), the load average.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import threading
import urllib.request

import onnx

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--server", action="append", required=True, help="a ferry binary to serve with (repeat: alternated)")
ap.add_argument("--perf", help="the ferry binary whose `perf` is the client (default: the first --server)")
ap.add_argument("--count", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--max-batch", type=int, default=8)
ap.add_argument("--batches", default="1,4")
ap.add_argument("--window-ms", default="3000")
ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args()

repo = tempfile.mkdtemp(prefix="serve_instances_rss_")
m = onnx.load(a.model)
for v in list(m.graph.input) + list(m.graph.output):
    d = v.type.tensor_type.shape.dim[0]
    d.ClearField("dim_value")
    d.dim_param = "N"
del m.graph.value_info[:]
os.makedirs(os.path.join(repo, "m", "1"))
onnx.save(m, os.path.join(repo, "m", "1", "model.onnx"))
with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
    f.write('name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: %d\ninstance_group [ { count: %d kind: KIND_CPU } ]\n'
            % (a.max_batch, a.count))
perf = a.perf or a.server[0]


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024.0, 1)
    return out


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def items(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/v2/models/m/stats" % port, timeout=30) as r:
        return int(json.load(r)["model_stats"][0]["inference_count"])


def one(server):
    p = subprocess.Popen([server, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                          "--grpc-port", "0", "--metrics-port", "0", "--threads", str(a.threads)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        found = re.search(r"HTTP on 127\.0\.0\.1:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    res = {"server": server, "after_load": status(p.pid)}
    for b in a.batches.split(","):
        out = os.path.join(repo, "perf.json")
        cpu0, n0 = cpu_ms(p.pid), items(port)
        subprocess.run([perf, "perf", "127.0.0.1:%d" % port, "-m", "m", "--concurrency-range", "2", "-b", b, "-p", a.window_ms,
                        "--max-trials", "3", "--json", out], capture_output=True, text=True)
        try:
            with open(out) as f:
                row = json.load(f)[0]
            res["b" + b] = {"inferences_per_s": round(row["throughput"], 2),
                            "server_compute_ms": round(row["server_compute_infer_us"] / 1e3, 1),
                            "server_cpu_ms_per_inference": round((cpu_ms(p.pid) - cpu0) / max(1, items(port) - n0), 1)}
        except (OSError, ValueError, KeyError, IndexError):
            res["b" + b] = "perf failed"
        res["after_b" + b] = status(p.pid)
    p.terminate()
    p.wait()
    with open("/proc/loadavg") as f:
        res["load"] = f.read().split()[:3]
    return res


for r in range(a.rounds):
    for s in a.server:
        print(json.dumps(dict(one(s), round=r + 1)), flush=True)

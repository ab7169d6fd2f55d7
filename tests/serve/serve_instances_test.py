#!/usr/bin/python3
"""`ferry serve`'s instance_group (issue 35): the instances of a model run batches at the same time,
with the server's threads divided between them, and share one copy of the weights.

A dynamic-batch .onnx model (max_batch_size 4) whose twelve 3x3 convolutions (256 channels, 14x14) run
ferry's Winograd, each on transformed weights 16/9 the size of its plain ones; two clients send
batches of 4 at once (max_batch_size and preferred_batch_size 4: each request is a batch of its own,
never merged with the other client's, run by an instance thread, never inline on the front end's
thread). Checked on servers with count 2 and count 1, both
`--threads 2`:
- at the same time: the trace file's COMPUTE_START..COMPUTE_END of the two clients' requests overlap
  with count 2 and never with count 1;
- threads divided: with count 2 the process's CPU time during the traffic is on two threads (one per
  instance, no OpenMP worker beside them); with count 1 the one instance runs on two;
- one copy of the weights: the count-2 server's resident set after the traffic exceeds the count-1
  server's by less than half the plain weights (one more copy of the Winograd forms would be 1.8x them).

usage: serve_instances_test.py FERRY WORKDIR
"""
import json
import os
import shutil
import sys
import threading
import time

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

from serve_util import ServeProcess, check, failures

FERRY, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
T = 60  # seconds, every call
CONVS, C, HW, BATCH, REQUESTS = 12, 256, 14, 4, 8

rng = np.random.default_rng(3)
inits, nodes = [], []
w = (rng.standard_normal((C, 8, 1, 1)) * 0.3).astype(np.float32)
inits.append(numpy_helper.from_array(w, "w0"))
nodes.append(helper.make_node("Conv", ["x", "w0"], ["h0"]))
weight_bytes = 0
for i in range(CONVS):
    w = (rng.standard_normal((C, C, 3, 3)) * 0.02).astype(np.float32)
    weight_bytes += w.nbytes
    inits.append(numpy_helper.from_array(w, "w%d" % (i + 1)))
    nodes.append(helper.make_node("Conv", ["h%d" % i, "w%d" % (i + 1)], ["c%d" % (i + 1)], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c%d" % (i + 1)], ["h%d" % (i + 1)]))
nodes.append(helper.make_node("GlobalAveragePool", ["h%d" % CONVS], ["g"]))
nodes.append(helper.make_node("Flatten", ["g"], ["y"]))
graph = helper.make_graph(nodes, "instances", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, HW, HW])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C])], inits)
MODEL = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

CONFIG = """name: "m"
platform: "onnxruntime_onnx"
max_batch_size: %d
input [ { name: "x" data_type: TYPE_FP32 dims: [ 8, %d, %d ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ %d ] } ]
dynamic_batching { preferred_batch_size: [ %d ] max_queue_delay_microseconds: 100000 }
instance_group [ { count: %%d kind: KIND_CPU } ]
""" % (BATCH, HW, HW, C, BATCH)


def cpu_by_thread(pid):
    """{tid: utime + stime in clock ticks} of the process's threads now."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def serve(count):
    """Starts a server with `count` instances, sends the two clients' traffic; returns (compute
    intervals by client, CPU ticks by thread during the traffic, VmRSS KiB after it, wall seconds)."""
    repo = os.path.join(WORK, "repo%d" % count)
    os.makedirs(os.path.join(repo, "m", "1"))
    onnx.save(MODEL, os.path.join(repo, "m", "1", "model.onnx"))
    with open(os.path.join(repo, "m", "config.pbtxt"), "w") as f:
        f.write(CONFIG % count)
    trace = os.path.join(WORK, "trace%d.jsonl" % count)
    srv = ServeProcess(FERRY, repo, "--trace-file", trace, "--trace-level", "TIMESTAMPS", "--trace-rate", "1", threads=2)
    try:
        if not check(srv.port is not None, "count %d: the server started: %s" % (count, srv.log()[-2000:])):
            return None
        url = srv.url + "/v2/models/m/infer"
        x = rng.standard_normal((BATCH, 8, HW, HW)).astype(np.float32)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
        r = requests.post(url, data=json.dumps(dict(body, id="warm")), timeout=T)  # the first run makes the plans
        check(r.status_code == 200, "count %d: a request: %d %s" % (count, r.status_code, r.text[:200]))
        errors = []

        def client(k):
            for i in range(REQUESTS):
                r = requests.post(url, data=json.dumps(dict(body, id="c%d_%d" % (k, i))), timeout=T)
                if r.status_code != 200:
                    errors.append(r.text[:200])

        before = cpu_by_thread(srv.proc.pid)
        start = time.time()
        clients = [threading.Thread(target=client, args=(k,)) for k in range(2)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        wall = time.time() - start
        after = cpu_by_thread(srv.proc.pid)
        rss = rss_kib(srv.proc.pid)
        check(not errors, "count %d: every request answered: %s" % (count, errors[:2]))
        ticks = {tid: after[tid] - before.get(tid, 0) for tid in after}
        spans = {0: [], 1: []}
        with open(trace) as f:
            for line in f:
                t = json.loads(line)
                rid = t.get("request_id", "")
                if not rid.startswith("c"):
                    continue
                ns = {s["name"]: s["ns"] for s in t.get("timestamps", [])}
                spans[int(rid[1])].append((ns["COMPUTE_START"], ns["COMPUTE_END"]))
        return spans, ticks, rss, wall
    finally:
        srv.stop()
        srv.kill()


def overlapping(spans):
    """Requests of client 0 whose computation overlapped one of client 1's."""
    return sum(any(a0 < b1 and a1 < b0 for a1, b1 in spans[1]) for a0, b0 in spans[0])


one = serve(1)
two = serve(2)
if one and two:
    for count, (spans, ticks, rss, wall) in ((1, one), (2, two)):
        busy = sorted(ticks.values(), reverse=True)
        print("count %d: %d of %d requests computed while the other client's did; %.1f s for %d requests; "
              "CPU ticks of the busiest threads %s; VmRSS %.1f MiB" % (count, overlapping(spans), len(spans[0]), wall,
                                                                      2 * REQUESTS, busy[:5], rss / 1024.0))
    check(len(one[0][0]) == REQUESTS and len(two[0][0]) == REQUESTS, "every request traced")
    # Two instances run two batches at the same time; one instance runs one at a time.
    check(overlapping(two[0]) >= REQUESTS // 2, "count 2: the two clients' batches ran at the same time")
    check(overlapping(one[0]) == 0, "count 1: one batch at a time")
    # Threads divided: a thread computes when it took over a tenth of the process's CPU time.
    computing = lambda ticks: sum(t > 0.1 * sum(ticks.values()) for t in ticks.values())
    check(computing(two[1]) == 2, "count 2, --threads 2: two computing threads, one per instance (%s)" % sorted(two[1].values())[-5:])
    check(computing(one[1]) == 2, "count 1, --threads 2: the instance runs on two threads (%s)" % sorted(one[1].values())[-5:])
    # One copy of the weights: a second instance adds its run state, not the weights' forms.
    extra = (two[2] - one[2]) * 1024
    check(extra < weight_bytes / 2, "count 2 holds %.1f MiB more than count 1: under half the %.1f MiB of weights"
          % (extra / 2**20, weight_bytes / 2**20))

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("serve_instances: ok")

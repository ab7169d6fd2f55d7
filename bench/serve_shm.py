#!/usr/bin/python3
"""`ferry serve`'s system shared memory against the binary tensor extension for one large tensor
(docs/serving.md, "Shared memory"): a Relu over FP32 [1, 3, 224, 224] (602,112 bytes in and out),
served on a free 127.0.0.1 port with --allow-client-shm true; one kept-alive HTTP connection sends
the same request back to back, the tensor either in the body (binary_data_size, binary output) or
in a /dev/shm region (input read in place, output written into the region). Rounds alternate the two.

  bench/serve_shm.py FERRY [--requests 300] [--rounds 3] [--threads 1]

Prints per round the client's p50 / p90 in microseconds for each form and the ratio of the p50s.
"""
import argparse
import http.client
import json
import mmap
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

ap = argparse.ArgumentParser()
ap.add_argument("ferry")
ap.add_argument("--requests", type=int, default=300)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--threads", type=int, default=1)
args = ap.parse_args()

SHAPE = [1, 3, 224, 224]
NBYTES = int(np.prod(SHAPE)) * 4
work = tempfile.mkdtemp(prefix="serve_shm_")
os.makedirs(os.path.join(work, "relu", "1"))
vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE)
g = helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "relu", [vi("a")], [vi("b")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(work, "relu", "1", "model.onnx"))

key = "/ferry_serve_shm_bench_%d" % os.getpid()
with open("/dev/shm" + key, "wb") as f:
    f.truncate(2 * NBYTES)
shm = open("/dev/shm" + key, "r+b")
view = mmap.mmap(shm.fileno(), 2 * NBYTES)
x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
view[0:NBYTES] = x.tobytes()

proc = subprocess.Popen([args.ferry, "serve", "--model-repository", work, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                         "--metrics-port", "0", "--threads", str(args.threads), "--allow-client-shm", "true"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
port = None
started = threading.Event()


def pump():
    global port
    for line in proc.stderr:
        m = re.search(r"HTTP on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            started.set()
    started.set()


threading.Thread(target=pump, daemon=True).start()
started.wait(60)
try:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v2/systemsharedmemory/region/io/register", json.dumps({"key": key, "offset": 0, "byte_size": 2 * NBYTES}))
    r = conn.getresponse()
    assert r.status == 200, r.read()
    r.read()
    header = json.dumps({"inputs": [{"name": "a", "datatype": "FP32", "shape": SHAPE, "parameters": {"binary_data_size": NBYTES}}],
                         "outputs": [{"name": "b", "parameters": {"binary_data": True}}]}).encode()
    binary_body = header + x.tobytes()
    shm_body = json.dumps({"inputs": [{"name": "a", "datatype": "FP32", "shape": SHAPE,
                                       "parameters": {"shared_memory_region": "io", "shared_memory_byte_size": NBYTES}}],
                           "outputs": [{"name": "b", "parameters": {"shared_memory_region": "io", "shared_memory_byte_size": NBYTES,
                                                                    "shared_memory_offset": NBYTES}}]}).encode()
    want = np.maximum(x, 0)

    def run(kind):
        body = binary_body if kind == "binary" else shm_body
        hdrs = {"Inference-Header-Content-Length": str(len(header))} if kind == "binary" else {}
        times = []
        for i in range(args.requests):
            t0 = time.perf_counter()
            conn.request("POST", "/v2/models/relu/infer", body, hdrs)
            r = conn.getresponse()
            data = r.read()
            if kind == "shm":
                out = np.frombuffer(view, np.float32, count=NBYTES // 4, offset=NBYTES)  # the client reads its region
            else:
                out = np.frombuffer(data, np.float32, offset=int(r.getheader("Inference-Header-Content-Length")))
            times.append((time.perf_counter() - t0) * 1e6)
            assert r.status == 200, data[:300]
            if i == 0:
                assert np.array_equal(out.reshape(SHAPE), want), kind
        times.sort()
        return times[len(times) // 2], times[len(times) * 9 // 10]

    print("load average before: %s" % open("/proc/loadavg").read().split()[:3])
    for rnd in range(args.rounds):
        b = run("binary")
        s = run("shm")
        print("round %d: binary p50 %.0f us p90 %.0f us | shared memory p50 %.0f us p90 %.0f us | shm/binary p50 %.2f" %
              (rnd + 1, b[0], b[1], s[0], s[1], s[0] / b[0]))
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
finally:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    view.close()
    shm.close()
    os.unlink("/dev/shm" + key)

#!/usr/bin/python3
"""`ferry serve` over HTTP/REST (KServe v2 as Triton serves it), through Python requests and curl:
every endpoint, JSON and binary tensors, the dynamic batcher (each request gets its own rows back),
overload (503), per-request timeout, client disconnect (CANCELED), bad inputs (the server keeps
serving), config.pbtxt warnings and errors, explicit load/unload, poll mode, /metrics and the SIGTERM drain.
Servers bind 127.0.0.1 on ports the system picks (--http-port 0), read back from the log.

usage: serve_http_test.py FERRY WORKDIR
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper

from serve_util import (ADD_CONFIG, ServeProcess, add_model, canceled_and_pending, check, echo_model, failures, pack_bytes, put, relu_model,
                        unpack_bytes, wait_for)

FERRY, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# ---- the repository -------------------------------------------------------------------------
REPO = os.path.join(WORK, "repo")
put(REPO, "add", add_model("N"), ADD_CONFIG % ("add", "optimization { graph { level: 1 } }\nmodel_warmup [ { name: \"w\" batch_size: 1 } ]"))
put(REPO, "add", add_model("N"), None, version=2)
put(REPO, "batched", add_model("N"),
    ADD_CONFIG % ("batched", "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 5000000 }\n"
                             "instance_group [ { count: 2 kind: KIND_CPU } ]"))
put(REPO, "queued", add_model("N"), ADD_CONFIG % ("queued", """dynamic_batching {
  preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 1500000
  default_queue_policy { max_queue_size: 2 allow_timeout_override: true }
}"""))
# One request's room, held 10 s (a full preferred batch of 8 runs at once): a disconnect frees it at once.
put(REPO, "cancel", add_model("N"), ADD_CONFIG % ("cancel", """dynamic_batching {
  preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 10000000
  default_queue_policy { max_queue_size: 1 }
}"""))
put(REPO, "relu", relu_model())  # no config.pbtxt: derived from the model (max_batch_size 0)
put(REPO, "broken", relu_model(), 'name: "broken"\nmax_batch_size: 0\ninput [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 3 ] ]\n')


def lower_model():  # BYTES in and out: StringNormalizer (lowercase), [1, 3]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.STRING, [1, 3])
    g = helper.make_graph([helper.make_node("StringNormalizer", ["s"], ["t"], case_change_action="LOWER")], "lower", [vi("s")], [vi("t")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


put(REPO, "lower", lower_model())  # no config.pbtxt: derived (TYPE_STRING, max_batch_size 0)
put(REPO, "echo", echo_model(), """max_batch_size: 4
input [ { name: "s" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "t" data_type: TYPE_STRING dims: [ 2 ] } ]
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 3000000 }
""")
put(REPO, "wrongtype", relu_model(), 'input [ { name: "a" data_type: TYPE_INT64 dims: [ 2, 3 ] } ]\n')


def infer_body(x, y, **extra):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.flatten().tolist()},
                       {"name": "y", "datatype": "FP32", "shape": list(y.shape), "data": y.flatten().tolist()}]}
    body.update(extra)
    return body


def post(url, body, **kw):
    return requests.post(url, data=body if isinstance(body, (bytes, str)) else json.dumps(body), timeout=30, **kw)


# ---- a failing model stops the default start (--exit-on-error true) ---------------------------
r = subprocess.run([FERRY, "serve", "--model-repository", REPO, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                    "--metrics-port", "0"], capture_output=True, text=True, timeout=120)
check(r.returncode == 2, "a model that fails to load exits 2 by default, got %d" % r.returncode)
check(re.search(r"broken/config\.pbtxt:3:\d+:", r.stderr) is not None, "the syntax error names file:line:column: " + r.stderr[-600:])
check("wrongtype/config.pbtxt: input 'a': data_type TYPE_INT64 but the model's input is TYPE_FP32" in r.stderr,
      "a config dtype that disagrees with the model is named: " + r.stderr[-600:])

# Triton's --disable-auto-complete-config and its older --strict-model-config true: a model without
# config.pbtxt ('relu') fails its load naming the file and the flag; the others load.
for flag in (["--disable-auto-complete-config"], ["--strict-model-config", "true"]):
    r = subprocess.run([FERRY, "serve", "--model-repository", REPO, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                        "--metrics-port", "0", "--threads", "1", *flag], capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and re.search(r"model 'relu': no \S*relu/config\.pbtxt, and --disable-auto-complete-config", r.stderr) is not None
          and "loaded model 'add'" in r.stderr, "%s: relu refused naming its config.pbtxt: %s" % (flag, r.stderr[-800:]))

srv = ServeProcess(FERRY, REPO, "--exit-on-error=false", "--http-max-input-size", "1000000")
try:
    check(srv.port is not None, "server started: " + srv.log()[-2000:])
    U = srv.url
    log = srv.log()
    check(re.search(r"warning: add/config\.pbtxt:6:\d+: .*optimization", log) is not None,
          "an unsupported config field is named in a warning with its line: " + log[-1500:])
    check(re.search(r"warning: add/config\.pbtxt:7:\d+: .*model_warmup", log) is not None,
          "an unsupported list of messages (Triton's `field [ {...} ]`) is skipped with a warning: " + log[-1500:])

    # Health, server metadata.
    check(requests.get(U + "/v2/health/live").status_code == 200, "live")
    # Strict readiness (Triton's default): 'broken' failed to load, so the server is not ready;
    # --strict-readiness=false: ready while it is not shutting down.
    check(requests.get(U + "/v2/health/ready").status_code == 400, "not ready while 'broken' is UNAVAILABLE (strict readiness)")
    # (Also Triton's flags that set nothing in ferry: accepted, each named in a warning.)
    lax = ServeProcess(FERRY, REPO, "--exit-on-error=false", "--strict-readiness=false", "--allow-grpc=false",
                       "--backend-config", "onnxruntime,default-max-batch-size=4", "--pinned-memory-pool-byte-size=0")
    try:
        check(lax.port is not None and requests.get(lax.url + "/v2/health/ready").status_code == 200,
              "--strict-readiness=false: ready with 'broken' UNAVAILABLE: " + lax.log()[-500:])
        check("warning: --backend-config onnxruntime,default-max-batch-size=4: Triton's flag has no effect in ferry" in lax.log()
              and "warning: --pinned-memory-pool-byte-size 0: Triton's flag has no effect in ferry" in lax.log(),
              "Triton's flags that set nothing are warned about: " + lax.log()[-800:])
    finally:
        lax.stop()
    # --allow-http=false (Triton's flag): no HTTP/REST listener; metrics (and gRPC) still serve.
    p = subprocess.Popen([FERRY, "serve", "--model-store", REPO, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                          "--metrics-port", "0", "--threads", "1", "--exit-on-error=false", "--allow-http=false"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        started = None
        for line in p.stderr:
            started = re.search(r"HTTP off \(--allow-http false\), metrics on 127\.0\.0\.1:(\d+)", line)
            if started:
                break
        if check(started is not None, "--allow-http=false (and --model-store, Triton's older name): the server says HTTP is off"):
            r = requests.get("http://127.0.0.1:%s/metrics" % started.group(1), timeout=30)
            check(r.status_code == 200 and "ferry_inference_count" in r.text, "--allow-http=false: metrics still serve")
    finally:
        p.send_signal(signal.SIGTERM)
        check(p.wait(30) == 0, "--allow-http=false: SIGTERM exits 0")
    meta = requests.get(U + "/v2").json()
    check(meta["name"] == "ferry" and "binary_tensor_data" in meta["extensions"], "server metadata: %s" % meta)

    # Model metadata / ready / config; the latest version is the default, version 1 is not loaded.
    md = requests.get(U + "/v2/models/add").json()
    check(md["versions"] == ["2"] and md["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
          "model metadata: %s" % md)
    check(requests.get(U + "/v2/models/add/versions/2/ready").status_code == 200, "version 2 ready")
    check(requests.get(U + "/v2/models/add/versions/1/ready").status_code == 400, "version 1 is not served (latest policy)")
    cfg = requests.get(U + "/v2/models/add/config").json()
    check(cfg["max_batch_size"] == 8 and cfg["input"][0]["name"] == "x", "config: %s" % cfg)
    rcfg = requests.get(U + "/v2/models/relu/config").json()
    check(rcfg["max_batch_size"] == 0 and rcfg["input"][0]["dims"] == [2, 3], "derived config: %s" % rcfg)

    # JSON inference.
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 0.5, np.float32)
    r = post(U + "/v2/models/add/infer", infer_body(x, y, id="req-1"))
    ok = check(r.status_code == 200, "infer: %d %s" % (r.status_code, r.text[:300]))
    if ok:
        out = r.json()
        check(out["id"] == "req-1" and out["model_name"] == "add" and out["model_version"] == "2", "response header: %s" % out)
        z = np.array(out["outputs"][0]["data"], np.float32).reshape(out["outputs"][0]["shape"])
        check(np.array_equal(z, x + y), "z = x + y: %s" % z)
    r = post(U + "/v2/models/relu/versions/1/infer",
             {"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 3], "data": [[-1, 2, -3], [4, -5, 6]]}]})
    check(r.status_code == 200 and r.json()["outputs"][0]["data"] == [0, 2, 0, 4, 0, 6], "nested data, no batching: " + r.text[:300])

    # Binary tensor data extension: binary inputs, one binary output.
    hdr = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}},
                                 {"name": "y", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}],
                      "outputs": [{"name": "z", "parameters": {"binary_data": True}}]}).encode()
    r = post(U + "/v2/models/add/infer", hdr + x.tobytes() + y.tobytes(),
             headers={"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"})
    if check(r.status_code == 200 and "Inference-Header-Content-Length" in r.headers, "binary infer: %d %s" % (r.status_code, r.text[:200])):
        n = int(r.headers["Inference-Header-Content-Length"])
        head = json.loads(r.content[:n])
        check(head["outputs"][0]["parameters"]["binary_data_size"] == 32, "binary output size: %s" % head)
        check(np.array_equal(np.frombuffer(r.content[n:], np.float32).reshape(2, 4), x + y), "binary output values")

    # curl: a JSON request, and a body over --http-max-input-size (curl sends Expect: 100-continue).
    req_file = os.path.join(WORK, "req.json")
    with open(req_file, "w") as f:
        json.dump(infer_body(x, y), f)
    c = subprocess.run(["curl", "-s", "-X", "POST", "--data-binary", "@" + req_file, U + "/v2/models/add/infer"],
                       capture_output=True, text=True, timeout=30)
    check(c.returncode == 0 and json.loads(c.stdout)["outputs"][0]["data"] == (x + y).flatten().tolist(), "curl infer: " + c.stdout[:200])
    big_file = os.path.join(WORK, "big.json")
    with open(big_file, "w") as f:
        f.write("[" + "0," * 1100000 + "0]")
    c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data-binary", "@" + big_file,
                        U + "/v2/models/add/infer"], capture_output=True, text=True, timeout=30)
    check(c.stdout == "413", "a body over --http-max-input-size is 413 (curl): %s" % c.stdout)
    r = post(U + "/v2/models/add/infer", b"x" * 1100000)
    check(r.status_code == 413 and "http-max-input-size" in r.json()["error"], "413 (requests): %d" % r.status_code)

    # Bad inputs: the right status and an error naming the input, expected vs given.
    def bad(body, status, needle, path="/v2/models/add/infer", headers=None):
        r = post(U + path, body, headers=headers)
        err = r.json().get("error", "") if r.headers.get("Content-Type", "").startswith("application/json") else r.text
        check(r.status_code == status and needle in err, "%s: want %d '%s', got %d %s" % (needle, status, needle, r.status_code, err))

    bad(b'{"inputs": [', 400, "malformed JSON")
    b = infer_body(x, y); b["inputs"][0]["datatype"] = "FP64"
    bad(b, 400, "input 'x': datatype FP64 but model 'add' expects FP32")
    b = infer_body(x, y); b["inputs"][0]["shape"] = [2, 5]; b["inputs"][0]["data"] = [0] * 10
    bad(b, 400, "unexpected shape for input 'x' of model 'add': expected [-1,4], got [2,5]")
    b = infer_body(x, y); b["inputs"].append({"name": "w", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4})
    bad(b, 400, "unexpected inference input 'w'")
    b = infer_body(x, y); del b["inputs"][1]
    bad(b, 400, "input 'y' is missing")
    b = infer_body(x, y); b["inputs"][0]["data"] = [1.0] * 7
    bad(b, 400, "input 'x': 7 values given but shape [2,4] needs 8")
    b = infer_body(x, y); b["inputs"][0]["data"][3] = "a"
    bad(b, 400, "input 'x': value 3 (\"a\") is not a FP32 value")
    big = np.zeros((9, 4), np.float32)
    bad(infer_body(big, big), 400, "batch size 9 is outside 1..8")
    bad(hdr + x.tobytes() + y.tobytes()[:-4], 400, "binary_data_size 32 runs past the end",
        headers={"Inference-Header-Content-Length": str(len(hdr))})
    bad(hdr + x.tobytes() + y.tobytes() + b"1234", 400, "bytes of binary data after the JSON header",
        headers={"Inference-Header-Content-Length": str(len(hdr))})
    bad(infer_body(x, y), 404, "unknown model: 'nope'", path="/v2/models/nope/infer")
    bad(infer_body(x, y), 404, "version 7 is not found", path="/v2/models/add/versions/7/infer")
    bad(infer_body(x, y), 503, "not ready", path="/v2/models/broken/infer")
    check(requests.get(U + "/v2/models/add/infer").status_code == 405, "GET on infer is 405")
    check(requests.get(U + "/v2/nothing/here").status_code == 404, "unknown path is 404")

    # Dynamic batching: four requests of 2 rows merge into one execution of 8; each gets its rows.
    results = {}

    def send(i):
        xi = np.full((2, 4), i, np.float32)
        r = post(U + "/v2/models/batched/infer", infer_body(xi, xi * 10))
        results[i] = r

    ts = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    t0 = time.time()
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i in range(4):
        r = results[i]
        if check(r.status_code == 200, "batched request %d: %d %s" % (i, r.status_code, r.text[:200])):
            check(r.json()["outputs"][0]["data"] == [11.0 * i] * 8, "batched request %d got its own rows: %s" % (i, r.json()["outputs"]))
    st = requests.get(U + "/v2/models/batched/stats").json()["model_stats"][0]
    check(st["execution_count"] == 1 and st["inference_count"] == 8, "one execution of 8 rows: %s" % st)
    check(st["batch_stats"] and st["batch_stats"][0]["batch_size"] == 8, "batch_stats shows size 8: %s" % st["batch_stats"])
    check(time.time() - t0 < 5.0, "a full preferred batch runs before max_queue_delay")

    # Overload: max_queue_size 2; the queue holds requests for 1.5 s; a third is rejected at once.
    q = {}

    def send_q(i):
        q[i] = post(U + "/v2/models/queued/infer", infer_body(x, y))

    ts = [threading.Thread(target=send_q, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    deadline = time.time() + 10
    while time.time() < deadline:
        m = requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text
        if 'ferry_inference_pending_request_count{model="queued",version="1"} 2' in m:
            break
        time.sleep(0.02)
    r = post(U + "/v2/models/queued/infer", infer_body(x, y))
    check(r.status_code == 503 and "the queue is full (max_queue_size 2)" in r.json()["error"], "overload 503: %d %s" % (r.status_code, r.text))
    [t.join() for t in ts]
    check(all(q[i].status_code == 200 for i in range(2)), "the queued requests complete after the delay")

    # Per-request timeout (allow_timeout_override): rejected after 100 ms in the queue, not 1.5 s.
    t0 = time.time()
    r = post(U + "/v2/models/queued/infer", infer_body(x, y, parameters={"timeout": 100000}))
    took = time.time() - t0
    check(r.status_code == 503 and "timed out" in r.json().get("error", ""), "timeout: %d %s" % (r.status_code, r.text))
    check(took < 1.4, "the timeout fires before max_queue_delay (%.2f s)" % took)

    # A client that disconnects takes its queued request with it (CANCELED).
    body = json.dumps(infer_body(x, y)).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v2/models/queued/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.2)
    s.close()
    deadline = time.time() + 10
    canceled = None
    while time.time() < deadline:
        m = requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text
        canceled = re.search(r'ferry_inference_request_failure\{model="queued",version="1",reason="CANCELED"\} (\d+)', m)
        if canceled and canceled.group(1) == "1":
            break
        time.sleep(0.05)
    check(canceled and canceled.group(1) == "1", "disconnect counted as CANCELED")
    st = requests.get(U + "/v2/models/queued/stats").json()["model_stats"][0]
    check(st["inference_stats"]["success"]["count"] == 2 and st["inference_stats"]["fail"]["count"] == 3,
          "queued: 2 successes, 3 failures (overload, timeout, disconnect): %s" % st["inference_stats"])

    # The disconnected request leaves the queue at once, not at the batcher's next wake (10 s away
    # on "cancel"): its max_queue_size 1 slot takes the next request, CANCELED and pending at once.
    def cancel_counts():  # (CANCELED, pending) of "cancel"
        return canceled_and_pending(requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text, "cancel")

    def wait_counts(want, limit):
        return wait_for(cancel_counts, want, limit)

    body = json.dumps(infer_body(x[:1], y[:1])).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v2/models/cancel/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    check(wait_counts((0, 1), 5) == (0, 1), "cancel: the request is queued: %s" % (cancel_counts(),))
    t0 = time.time()
    s.close()
    got = wait_counts((1, 0), 3)
    took = time.time() - t0
    check(got == (1, 0) and took < 3, "cancel: CANCELED 1, pending 0 %.2f s after the disconnect (the delay is 10 s): %s" % (took, got))
    x8, y8 = np.tile(x[:1], (8, 1)), np.tile(y[:1], (8, 1))
    r = post(U + "/v2/models/cancel/infer", infer_body(x8, y8))
    check(r.status_code == 200 and r.json()["outputs"][0]["data"] == (x8 + y8).flatten().tolist(),
          "cancel: the freed slot takes the next request: %d %s" % (r.status_code, r.text[:200]))
    check(time.time() - t0 < 5 and cancel_counts() == (1, 0), "cancel: answered %.2f s after the disconnect, pending 0: %s"
          % (time.time() - t0, cancel_counts()))

    # Metrics: Prometheus text, per model and version.
    m = requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port).text
    check('ferry_inference_request_success{model="batched",version="1"} 4' in m, "success counter")
    check('ferry_inference_count{model="batched",version="1"} 8' in m and 'ferry_inference_exec_count{model="batched",version="1"} 1' in m,
          "inference and execution counts")
    check('ferry_inference_request_failure{model="queued",version="1",reason="REJECTED"} 2' in m, "REJECTED failures")
    check(re.search(r'ferry_inference_request_duration_us_bucket\{model="batched",version="1",le="\+Inf"\} 4', m) is not None, "histogram")
    # The latency histogram counts successes only (Triton's request durations): the queued model's
    # 2 successes, not its 3 failures; each waited its 1.5 s delay, so none is under 1 s.
    check('ferry_inference_request_duration_us_count{model="queued",version="1"} 2' in m
          and 'ferry_inference_request_duration_us_bucket{model="queued",version="1",le="1000000"} 0' in m
          and 'ferry_inference_request_duration_us_bucket{model="queued",version="1",le="5000000"} 2' in m,
          "histogram of successes: %s" % [l for l in m.splitlines() if 'duration_us_' in l and '"queued"' in l])
    check("# TYPE ferry_inference_request_duration_us histogram" in m and "process_resident_memory_bytes" in m, "families")
    # Cumulative queue time: the queued model's 2 successes waited for its 1.5 s max_queue_delay (the
    # first the whole delay, the second from its own arrival); its failures never left the queue for
    # a run. Its compute is two executions of an Add.
    queue_us = re.search(r'ferry_inference_queue_duration_us\{model="queued",version="1"\} (\d+)', m)
    compute_us = re.search(r'ferry_inference_compute_infer_duration_us\{model="queued",version="1"\} (\d+)', m)
    check(queue_us is not None and 1500000 <= int(queue_us.group(1)) <= 2 * 1500000 + 500000,
          "queue_duration_us of 2 requests held by a 1.5 s max_queue_delay: %s" % (queue_us and queue_us.group(0)))
    check(compute_us is not None and int(compute_us.group(1)) < 200000, "compute_infer_duration_us of 2 Add runs: %s" % (compute_us and compute_us.group(0)))

    # Repository index; load/unload are refused outside explicit mode.
    idx = {(e["name"], e.get("version", "")): e for e in post(U + "/v2/repository/index", b"").json()}
    check(idx[("add", "2")]["state"] == "READY", "index: add READY")
    check(idx[("broken", "")]["state"] == "UNAVAILABLE" and "config.pbtxt:3:" in idx[("broken", "")]["reason"],
          "index: broken UNAVAILABLE with its reason: %s" % idx.get(("broken", "")))
    ready_only = post(U + "/v2/repository/index", {"ready": True}).json()
    check(all(e["state"] == "READY" for e in ready_only), "index ready only")
    check(post(U + "/v2/repository/models/relu/unload", b"").status_code == 400, "unload refused in mode none")

    # ferry perf: two concurrency levels, binary tensors, JSON and CSV reports, server-side split.
    pj, pc = os.path.join(WORK, "perf.json"), os.path.join(WORK, "perf.csv")
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "add", "--concurrency-range", "1:2", "-p", "100",
                        "--max-trials", "3", "-b", "2", "--json", pj, "-f", pc], capture_output=True, text=True, timeout=60)
    if check(r.returncode == 0, "ferry perf: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check([row["concurrency"] for row in rows] == [1, 2] and all(row["throughput"] > 0 and row["errors"] == 0 for row in rows),
              "perf rows: %s" % rows)
        check(all(row["avg_batch"] == 2.0 for row in rows), "perf: avg batch 2 from the server's statistics: %s" % rows)
        check(open(pc).readline().startswith("Concurrency,Inferences/Second"), "perf CSV header")
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "nope"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "unknown model" in r.stderr, "perf on an unknown model: %s" % r.stderr[-300:])

    # Triton's classification extension: each row's top classes as "value:index" BYTES.
    xc = np.array([[1, 5, 3, 2], [0, -1, 7, 7]], np.float32)
    r = post(U + "/v2/models/add/infer", infer_body(xc, np.zeros_like(xc), outputs=[{"name": "z", "parameters": {"classification": 2}}]))
    o = r.json()["outputs"][0] if r.status_code == 200 else {}
    check(o.get("datatype") == "BYTES" and o.get("shape") == [2, 2] and o.get("data") == ["5.000000:1", "3.000000:2", "7.000000:2", "7.000000:3"],
          "classification: " + r.text)
    r = post(U + "/v2/models/add/infer", infer_body(xc, np.zeros_like(xc), outputs=[{"name": "z", "parameters": {"classification": 0}}]))
    check(r.status_code == 400 and "output 'z': parameter 'classification' is 0" in r.json()["error"], "classification 0: " + r.text)
    r = post(U + "/v2/models/add/infer", infer_body(xc, np.zeros_like(xc), outputs=[{"name": "z", "parameters": {"classification": 9, "binary_data": True}}]))
    hl = int(r.headers.get("Inference-Header-Content-Length", "0"))
    check(r.status_code == 200 and unpack_bytes(r.content[hl:]) == [b"5.000000:1", b"3.000000:2", b"2.000000:3", b"1.000000:0",
                                                                   b"7.000000:2", b"7.000000:3", b"0.000000:0", b"-1.000000:1"],
          "classification, more classes than values, binary: %s" % r.content[hl:hl + 80])

    # --io-spin-microseconds: the I/O threads and gRPC pollers spin only right after work, for at
    # most the budget; an idle server burns no core. (The spin also stops where the machine's cores
    # are busy, so on a loaded machine this passes without spinning at all.)
    spinner = ServeProcess(FERRY, REPO, "--model-control-mode", "explicit", "--load-model", "add", "--io-spin-microseconds", "100000")
    try:
        for proto in [p for p in ("http", "grpc") if p in spinner.ports]:
            port = spinner.ports[proto]
            r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % port, "-i", proto, "-m", "add", "-p", "100", "--max-trials", "3", "-b", "2"],
                               capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, "ferry perf against a spinning server (%s): %s" % (proto, r.stderr[-300:]))

        def cpu_s(pid):  # utime + stime
            f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        time.sleep(0.3)  # past the last spin (0.1 s at most)
        t0 = cpu_s(spinner.proc.pid)
        time.sleep(1.0)
        used = cpu_s(spinner.proc.pid) - t0
        check(used < 0.05, "an idle server with --io-spin-microseconds 100000 used %.2f s of CPU in 1 s" % used)
    finally:
        spinner.stop()

    # BYTES tensors: JSON strings, binary (length-prefixed), batched rows split back, bad input.
    r = post(U + "/v2/models/lower/infer", {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1, 3], "data": ["Hello", "WORLD", "a B"]}]})
    check(r.status_code == 200 and r.json()["outputs"][0]["datatype"] == "BYTES" and r.json()["outputs"][0]["data"] == ["hello", "world", "a b"],
          "BYTES in JSON through StringNormalizer: %s" % r.text[:300])
    check(requests.get(U + "/v2/models/lower").json()["inputs"][0]["datatype"] == "BYTES", "BYTES in the metadata")

    def echo_binary(rows):
        payload = pack_bytes([v for row in rows for v in row])
        hdr = json.dumps({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [len(rows), 2], "parameters": {"binary_data_size": len(payload)}}],
                          "outputs": [{"name": "t", "parameters": {"binary_data": True}}]}).encode()
        return post(U + "/v2/models/echo/infer", hdr + payload, headers={"Inference-Header-Content-Length": str(len(hdr))})

    got = {}
    rows_a, rows_b = [[b"", b"\x00bin\xff"]], [[b"r1", "\u00e9t\u00e9".encode()], [b"x" * 300, b"z"]]
    ta = threading.Thread(target=lambda: got.setdefault("a", echo_binary(rows_a)))
    ta.start()
    time.sleep(0.2)
    rb = echo_binary(rows_b)
    ta.join()
    for key, rows, r in (("a", rows_a, got["a"]), ("b", rows_b, rb)):
        ok = r.status_code == 200
        if ok:
            hl = int(r.headers["Inference-Header-Content-Length"])
            out = json.loads(r.content[:hl])["outputs"][0]
            ok = out["shape"] == [len(rows), 2] and unpack_bytes(r.content[hl:]) == [v for row in rows for v in row] and \
                out["parameters"]["binary_data_size"] == len(r.content) - hl
        check(ok, "BYTES binary, batched: request %s gets its own rows: %s" % (key, r.content[:300]))
    st = requests.get(U + "/v2/models/echo/stats").json()["model_stats"][0]
    check(st["inference_count"] == 3 and st["execution_count"] == 1, "BYTES requests merged into one batch of 3: %s" % st)
    r = post(U + "/v2/models/echo/infer", {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1, 2], "data": ["a", 3]}]})
    check(r.status_code == 400 and "input 's': value 1 (3) is not a BYTES value" in r.json()["error"], "BYTES: a number in JSON: " + r.text)
    bad = pack_bytes([b"ab"]) + struct.pack("<I", 50) + b"xy"
    hdr = json.dumps({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1, 2], "parameters": {"binary_data_size": len(bad)}}]}).encode()
    r = post(U + "/v2/models/echo/infer", hdr + bad, headers={"Inference-Header-Content-Length": str(len(hdr))})
    check(r.status_code == 400 and "input 's': BYTES element 1 says 50 bytes but only 2 are left" in r.json()["error"],
          "BYTES: a length past the end: " + r.text)
    r = post(U + "/v2/models/echo/infer", {"inputs": [{"name": "s", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
    check(r.status_code == 400 and "datatype FP32 but model 'echo' expects BYTES" in r.json()["error"], "BYTES: wrong datatype: " + r.text)
    # ferry perf with BYTES inputs: random strings, binary (length-prefixed) and JSON; no .npy for them
    # (3 rows a request: echo's preferred batch, so it runs without its 3 s delay).
    for extra in ([], ["--json-data"]):
        r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "echo", "-p", "100", "--max-trials", "3", "-b", "3",
                            "--string-length", "7", "--json", pj] + extra, capture_output=True, text=True, timeout=60)
        if check(r.returncode == 0, "ferry perf BYTES %s: %d %s %s" % (extra, r.returncode, r.stdout[-500:], r.stderr[-500:])):
            rows = json.load(open(pj))
            check(rows[0]["throughput"] > 0 and rows[0]["errors"] == 0 and rows[0]["avg_batch"] == 3.0, "perf BYTES rows %s: %s" % (extra, rows))
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "echo", "--input", os.path.join(WORK, "none.npy")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "input 's' is BYTES: a .npy file cannot give it" in r.stderr, "perf BYTES from .npy: " + r.stderr[-300:])

    # Still serving after every bad request.
    r = post(U + "/v2/models/add/infer", infer_body(x, y))
    check(r.status_code == 200, "still serving")
finally:
    rc = srv.stop()
check(rc == 0, "SIGTERM with nothing queued exits 0, got %s" % rc)

# ---- explicit mode: load / unload; SIGTERM drains a queued request ---------------------------
srv = ServeProcess(FERRY, REPO, "--model-control-mode", "explicit", "--load-model", "queued", "--load-model", "add")
try:
    U = srv.url
    check(requests.get(U + "/v2/models/relu/ready").status_code == 400, "relu not loaded in explicit mode")
    # Triton's load overrides (a config, model files) are refused naming one, as over gRPC; the
    # model stays unloaded. An empty "parameters" object is a plain load.
    r = post(U + "/v2/repository/models/relu/load", {"parameters": {"config": json.dumps({"max_batch_size": 4})}})
    check(r.status_code == 400 and "load parameters (such as 'config') are not supported by ferry" in r.json().get("error", ""),
          "a load with a config override is refused: %d %s" % (r.status_code, r.text))
    r = post(U + "/v2/repository/models/relu/load", b"{not json")
    check(r.status_code == 400 and "not a JSON object" in r.json().get("error", ""), "a load body that is not JSON: %d %s" % (r.status_code, r.text))
    check(requests.get(U + "/v2/models/relu/ready").status_code == 400, "relu still not loaded after the refused loads")
    check(post(U + "/v2/repository/models/relu/load", {"parameters": {}}).status_code == 200, "load relu")
    r = post(U + "/v2/models/relu/infer", {"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 3], "data": [1] * 6}]})
    check(r.status_code == 200, "infer after load")
    check(post(U + "/v2/repository/models/relu/unload", b"").status_code == 200, "unload relu")
    check(requests.get(U + "/v2/models/relu/ready").status_code == 400, "relu not ready after unload")
    check(requests.get(U + "/v2/health/ready").status_code == 200, "ready: every model loaded is ready")
    r = post(U + "/v2/repository/models/broken/load", b"")
    check(r.status_code == 400 and "config.pbtxt:3:" in r.json()["error"], "loading a broken model names the error: " + r.text)
    check(requests.get(U + "/v2/health/ready").status_code == 400, "not ready after a failed load (strict readiness)")
    check(post(U + "/v2/repository/models/broken/unload", b"").status_code == 200, "unload the failed model")
    check(requests.get(U + "/v2/health/ready").status_code == 200, "ready again once the failed model is unloaded")
    r = post(U + "/v2/repository/models/nothere/load", b"")
    check(r.status_code == 404, "loading an unknown model is 404")

    # SIGTERM while a request waits in the queue (1.5 s delay): not ready at once, new requests
    # 503, the queued one answered 200, exit 0.
    drained = {}
    t = threading.Thread(target=lambda: drained.setdefault("r", post(U + "/v2/models/queued/infer", infer_body(x, y))))
    t.start()
    deadline = time.time() + 10
    while time.time() < deadline:
        if 'ferry_inference_pending_request_count{model="queued",version="1"} 1' in requests.get(
                "http://127.0.0.1:%d/metrics" % srv.metrics_port).text:
            break
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    check(requests.get(U + "/v2/health/ready").status_code == 400, "not ready after SIGTERM")
    r = post(U + "/v2/models/add/infer", infer_body(x, y))
    check(r.status_code == 503 and "shutting down" in r.json()["error"], "new requests 503 while draining")
    t.join()
    check(drained["r"].status_code == 200, "the queued request finishes during the drain")
    srv.proc.wait(30)
    check(srv.proc.returncode == 0, "exit 0 after the drain, got %s" % srv.proc.returncode)
finally:
    srv.stop()


# ---- poll mode: the repository rescanned every 0.3 s while a client keeps calling another model ----
PREPO = os.path.join(WORK, "poll_repo")
put(PREPO, "add", add_model("N"), ADD_CONFIG % ("add", ""))
put(PREPO, "relu", relu_model())


def wait_for(pred, what, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return check(False, "poll: timed out waiting for " + what)


def index_of(url):
    return {(e["name"], e.get("version", "")): e for e in post(url + "/v2/repository/index", b"").json()}


srv = ServeProcess(FERRY, PREPO, "--model-control-mode", "poll", "--repository-poll-secs", "0.3")
stop_calls, outcomes = threading.Event(), []
try:
    U = srv.url
    check(requests.get(U + "/v2/models/add/ready").status_code == 200, "poll: add loaded at start")
    check(post(U + "/v2/repository/models/relu/unload", b"").status_code == 400, "poll: unload API refused")
    relu_in = {"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 3], "data": [-1, 2, -3, 4, -5, 6]}]}

    def caller():  # another model's requests, all through every load, reload and unload below
        while not stop_calls.is_set():
            r = post(U + "/v2/models/relu/infer", relu_in)
            outcomes.append((r.status_code, r.json().get("outputs", [{}])[0].get("data") if r.status_code == 200 else r.text))

    add_outcomes = []

    def add_caller():  # the model being replaced: a request racing the swap goes on to the new version
        while not stop_calls.is_set():
            r = post(U + "/v2/models/add/infer", infer_body(x, y))
            add_outcomes.append((r.status_code, r.json()["outputs"][0]["data"] == (x + y).flatten().tolist() if r.status_code == 200 else r.text))

    t = threading.Thread(target=caller)
    t.start()
    t2 = threading.Thread(target=add_caller)
    t2.start()
    # A new model appears.
    put(PREPO, "add2", add_model("N"), ADD_CONFIG % ("add2", ""))
    if wait_for(lambda: requests.get(U + "/v2/models/add2/ready").status_code == 200, "add2 loaded"):
        check(post(U + "/v2/models/add2/infer", infer_body(x, y)).status_code == 200, "poll: infer on the new model")
    # A new version: the policy (latest 1) moves to it, version 1 is unloaded.
    put(PREPO, "add", add_model("N"), None, version=2)
    wait_for(lambda: requests.get(U + "/v2/models/add/versions/2/ready").status_code == 200, "add version 2 loaded")
    wait_for(lambda: requests.get(U + "/v2/models/add/versions/1/ready").status_code != 200, "add version 1 unloaded")
    check(post(U + "/v2/models/add/infer", infer_body(x, y)).status_code == 200, "poll: add serves after the new version")
    # A version directory that is a symlink (deployments swap them): a new model file behind it reloads.
    os.makedirs(os.path.join(WORK, "deploy", "a"))
    onnx.save(relu_model(), os.path.join(WORK, "deploy", "a", "model.onnx"))
    os.makedirs(os.path.join(PREPO, "linked"))
    os.symlink(os.path.join(WORK, "deploy", "a"), os.path.join(PREPO, "linked", "1"))
    wait_for(lambda: requests.get(U + "/v2/models/linked/ready").status_code == 200, "linked loaded through its symlinked version")
    n_linked = srv.log().count("poll: loaded model 'linked'")
    time.sleep(0.01)  # a new file (another modification time) replaces the one behind the symlink
    onnx.save(relu_model(), os.path.join(WORK, "deploy", "a", "model.onnx.tmp"))
    os.replace(os.path.join(WORK, "deploy", "a", "model.onnx.tmp"), os.path.join(WORK, "deploy", "a", "model.onnx"))
    wait_for(lambda: srv.log().count("poll: loaded model 'linked'") > n_linked, "linked reloaded after its file behind the symlink changed")
    # A model that fails to load is listed UNAVAILABLE with its reason.
    put(PREPO, "bad", relu_model(), 'name: "bad"\nmax_batch_size: 0\ninput [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 3 ] ]\n')
    wait_for(lambda: "config.pbtxt:3:" in index_of(U).get(("bad", ""), {}).get("reason", ""), "bad listed with its reason")
    check(index_of(U).get(("bad", ""), {}).get("state") == "UNAVAILABLE", "poll: bad UNAVAILABLE: %s" % index_of(U).get(("bad", "")))
    # Fixing it on disk loads it at the next poll.
    with open(os.path.join(PREPO, "bad", "config.pbtxt"), "w") as f:
        f.write('name: "bad"\nmax_batch_size: 0\n')
    wait_for(lambda: requests.get(U + "/v2/models/bad/ready").status_code == 200, "bad loaded once fixed")
    # A reload that fails keeps the loaded versions serving (Triton's rule).
    with open(os.path.join(PREPO, "add2", "config.pbtxt"), "a") as f:
        f.write("max_batch_size: oops\n")
    wait_for(lambda: "model 'add2': the reload failed" in srv.log(), "add2's failed reload logged")
    check(post(U + "/v2/models/add2/infer", infer_body(x, y)).status_code == 200, "poll: add2 still serves after a failed reload")
    # A removed model is unloaded.
    shutil.rmtree(os.path.join(PREPO, "add2"))
    wait_for(lambda: requests.get(U + "/v2/models/add2/ready").status_code != 200, "add2 unloaded once removed")
    check(("add2", "1") not in index_of(U), "poll: add2 gone from the index")
    time.sleep(0.4)  # one more poll: nothing changed, nothing reloaded
    stop_calls.set()
    t.join(30)
    t2.join(30)
    check(len(add_outcomes) > 5 and all(c == 200 and ok is True for c, ok in add_outcomes),
          "poll: every request to add answered while its version 2 replaced version 1 (%d calls, bad: %s)"
          % (len(add_outcomes), [o for o in add_outcomes if o != (200, True)][:3]))
    check(len(outcomes) > 5 and all(c == 200 and d == [0, 2, 0, 4, 0, 6] for c, d in outcomes),
          "poll: every request to relu answered correctly during the changes (%d calls, bad: %s)"
          % (len(outcomes), [o for o in outcomes if o[0] != 200][:3]))
    log = srv.log()
    check("poll: loaded model 'relu'" not in log and log.count("poll: loaded model 'add'") == 1,
          "poll: unchanged models are not reloaded:\n" + "".join(l for l in srv.lines if "poll:" in l))
finally:
    stop_calls.set()
    check(srv.stop() == 0, "poll: SIGTERM exits 0")

if failures:
    print("%d failures" % len(failures))
    sys.exit(1)
print("serve_http: all checks passed")

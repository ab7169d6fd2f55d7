#!/usr/bin/python3
"""`ferry serve` behaviours the other serve tests leave out (issue 35, audit items 5, 6, 8, 9, 10):
the per-version HTTP GETs (metadata, config, stats), GET /v2/models/stats and their 404s naming the
model; version_policy all / specific / latest num_versions and default_model_filename, each version
answering with its own model file; default_queue_policy default_timeout_microseconds, the warnings
for timeout_action DELAY and KIND_GPU, a valid parameters "threads"; explicit load / unload of one
model while a client keeps calling another; the SIGINT drain and an expired --exit-timeout-secs;
`ferry perf`'s percentiles, server split, `stable`, a stepped --concurrency-range and --input .npy.
Over gRPC (stubs generated here, as serve_grpc_test.py's): the per-version ModelMetadata, ModelConfig,
ModelStatistics and ModelReady, their NOT_FOUND naming model and version, and the default message
limit (Triton's INT32_MAX: a message over HTTP's 64 MB is decoded). The config's backend fields as
Triton completes them. /metrics: compute and queue time against the client's wall time, the process's
CPU time, memory and descriptors against /proc, failures by reason (BACKEND from a model that fails
at run time; OTHER, which no ferry failure is, stays 0).
Servers bind 127.0.0.1 on ports the system picks (serve_util.ServeProcess).

usage: serve_coverage_test.py FERRY SRC_DIR WORKDIR
"""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

from serve_util import ADD_CONFIG, ServeProcess, check, failures, grpc_stubs

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
T = 30  # seconds, every HTTP call


def plus_model(k):
    """z = x + y + k, FP32 [N, 4]: each version (or file) answers with its own k."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Add", ["s", "k"], ["z"])], "plus",
                          [vi("x"), vi("y")], [vi("z")], [helper.make_tensor("k", TensorProto.FLOAT, [], [float(k)])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def heavy_model():
    """y = x W0 ... W6, FP32 [256, 16] -> [256, 16], no batch axis: 340 M multiply-adds, so that the
    model's run is most of a request's time (the compute metric is checked against the client's)."""
    rng = np.random.default_rng(3)
    dims = [16, 512, 512, 512, 512, 512, 512, 16]
    ws = [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), "w%d" % i)
          for i, (a, b) in enumerate(zip(dims, dims[1:]))]
    names = ["x"] + ["h%d" % i for i in range(len(ws) - 1)] + ["y"]
    nodes = [helper.make_node("MatMul", [names[i], w.name], [names[i + 1]]) for i, w in enumerate(ws)]
    g = helper.make_graph(nodes, "heavy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 16])], ws)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reshape_model():
    """y = Reshape(x, [2, 3]), x FP32 [L]: a request of 6 values runs, any other count passes the
    config's dims [-1] and fails in the model's run (a BACKEND failure)."""
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "reshape",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["L"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array([2, 3], np.int64), "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


REPO = os.path.join(WORK, "repo")


def put(name, config_tail, versions=(1,), files=None):
    """REPO/name/config.pbtxt (ADD_CONFIG + config_tail) and REPO/name/V/model.onnx with k = V for each
    version, or the files {V: {file name: k}} when given."""
    files = files or {v: {"model.onnx": v} for v in versions}
    for v, fs in files.items():
        os.makedirs(os.path.join(REPO, name, str(v)), exist_ok=True)
        for fname, k in fs.items():
            onnx.save(plus_model(k), os.path.join(REPO, name, str(v), fname))
    with open(os.path.join(REPO, name, "config.pbtxt"), "w") as f:
        f.write(ADD_CONFIG % (name, config_tail))


put("plain", "")
put("all3", "version_policy { all { } }", versions=(1, 2, 3))
put("spec", "version_policy { specific { versions: [ 1, 3 ] } }", versions=(1, 2, 3))
put("lat2", "version_policy { latest { num_versions: 2 } }", versions=(1, 2, 3))
put("dflt", "", versions=(1, 2, 3))  # no policy: latest 1
put("named", 'default_model_filename: "net.onnx"', files={1: {"net.onnx": 5, "model.onnx": 9}})
put("timed", """dynamic_batching {
  preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 3000000
  default_queue_policy { default_timeout_microseconds: 200000 timeout_action: DELAY }
}""")
put("gpu", 'instance_group [ { count: 1 kind: KIND_GPU } ]\nparameters { key: "threads" value { string_value: "1" } }')
# Requests wait 3 s (the SIGINT drain) or 60 s (longer than --exit-timeout-secs) for a batch of 8.
put("slow", "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 3000000 }")
put("stuck", "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 60000000 }")
for name, model in (("bare", plus_model(1)), ("heavy", heavy_model()), ("reshape", reshape_model())):  # no config.pbtxt
    os.makedirs(os.path.join(REPO, name, "1"))
    onnx.save(model, os.path.join(REPO, name, "1", "model.onnx"))

x = np.arange(8, dtype=np.float32).reshape(2, 4)
y = np.full((2, 4), 0.5, np.float32)


def body(**extra):
    b = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x.flatten().tolist()},
                    {"name": "y", "datatype": "FP32", "shape": [2, 4], "data": y.flatten().tolist()}]}
    b.update(extra)
    return json.dumps(b)


def infer(url, model, version=None):
    path = "/v2/models/%s%s/infer" % (model, "/versions/%s" % version if version is not None else "")
    return requests.post(url + path, data=body(), timeout=T)


def answers_k(r, k):
    """The response is z = x + y + k."""
    return r.status_code == 200 and r.json()["outputs"][0]["data"] == (x + y + k).flatten().tolist()


def get(url, path):
    return requests.get(url + path, timeout=T)


def metric(text, name, labels=None):
    """The value of one sample of a /metrics text (None when absent)."""
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape("{%s}" % labels) if labels else ""), text, re.M)
    return float(m.group(1)) if m else None


def pending(srv, model):
    m = requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port, timeout=T).text
    g = re.search(r'ferry_inference_pending_request_count\{model="%s",version="1"\} (\d+)' % model, m)
    return int(g.group(1)) if g else -1


def wait_pending(srv, model, n, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pending(srv, model) == n:
            return True
        time.sleep(0.02)
    return False


t_start = time.time()
srv = ServeProcess(FERRY, REPO)
try:
    check(srv.port is not None, "server started: " + srv.log()[-2000:])
    U = srv.url
    log = srv.log()

    # ---- config: the warnings name the field; threads "1" and KIND_GPU load and serve ----------
    check(re.search(r"warning: timed/config\.pbtxt: default_queue_policy\.timeout_action DELAY is not supported", log) is not None,
          "timeout_action DELAY is warned naming the model and the field: " + log[-1500:])
    check(re.search(r"warning: gpu/config\.pbtxt: instance_group kind KIND_GPU", log) is not None,
          "KIND_GPU is warned naming the model and the field: " + log[-1500:])
    check("parameters \"threads\"" not in log, "a valid parameters \"threads\" is not warned about: " + log[-1500:])
    check(answers_k(infer(U, "gpu"), 1), "the model with threads \"1\" and KIND_GPU serves")
    check(get(U, "/v2/models/gpu/config").json().get("parameters", {}).get("threads", {}).get("string_value") == "1",
          "its config shows threads 1: %s" % get(U, "/v2/models/gpu/config").text[:400])

    # ---- version_policy: which versions load, each answers with its own file --------------------
    for model, served in (("all3", (1, 2, 3)), ("spec", (1, 3)), ("lat2", (2, 3)), ("dflt", (3,))):
        for v in (1, 2, 3):
            ready = get(U, "/v2/models/%s/versions/%d/ready" % (model, v)).status_code
            r = infer(U, model, v)
            if v in served:
                check(ready == 200, "%s version %d ready, got %d" % (model, v, ready))
                check(answers_k(r, v) and r.json()["model_version"] == str(v),
                      "%s version %d answers with its own model: %d %s" % (model, v, r.status_code, r.text[:300]))
            else:
                check(ready == 400, "%s version %d is not ready (policy), got %d" % (model, v, ready))
                check(r.status_code == 404 and "'%s' version %d is not found" % (model, v) in r.json().get("error", ""),
                      "%s version %d: infer 404 naming model and version: %d %s" % (model, v, r.status_code, r.text[:300]))
        md = get(U, "/v2/models/" + model).json()
        check(md.get("versions") == [str(v) for v in served], "%s metadata lists versions %s: %s" % (model, served, md))
        r = infer(U, model)
        check(answers_k(r, served[-1]) and r.json()["model_version"] == str(served[-1]),
              "%s without a version: the latest served (%d): %s" % (model, served[-1], r.text[:300]))
    r = infer(U, "named")
    check(answers_k(r, 5), "default_model_filename net.onnx is served, not model.onnx: %d %s" % (r.status_code, r.text[:300]))

    # ---- the per-version GETs, all models' stats, 404s naming the model -------------------------
    md = get(U, "/v2/models/all3/versions/2")
    check(md.status_code == 200 and md.json().get("name") == "all3" and md.json().get("versions") == ["1", "2", "3"]
          and md.json()["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
          "GET /v2/models/all3/versions/2 (metadata): %d %s" % (md.status_code, md.text[:400]))
    cfg = get(U, "/v2/models/all3/versions/2/config")
    check(cfg.status_code == 200 and cfg.json().get("name") == "all3" and cfg.json().get("max_batch_size") == 8
          and cfg.json().get("version_policy", {}).get("all") == {},
          "GET /v2/models/all3/versions/2/config: %d %s" % (cfg.status_code, cfg.text[:400]))
    # all3: versions 1, 2, 3 ran once each above (and 3 once more without a version).
    st = get(U, "/v2/models/all3/versions/2/stats")
    ms = st.json().get("model_stats", []) if st.status_code == 200 else []
    check(len(ms) == 1 and ms[0]["name"] == "all3" and ms[0]["version"] == "2" and ms[0]["inference_count"] == 2
          and ms[0]["inference_stats"]["success"]["count"] == 1,
          "GET /v2/models/all3/versions/2/stats: version 2 alone, one request of 2 rows: %d %s" % (st.status_code, st.text[:400]))
    st = get(U, "/v2/models/all3/stats").json()["model_stats"]
    check(sorted((m["version"], m["inference_stats"]["success"]["count"]) for m in st) == [("1", 1), ("2", 1), ("3", 2)],
          "GET /v2/models/all3/stats: every served version: %s" % [(m["version"], m["inference_stats"]) for m in st])
    st = get(U, "/v2/models/stats")
    allv = sorted((m["name"], m["version"]) for m in st.json().get("model_stats", [])) if st.status_code == 200 else []
    want = sorted([("plain", "1"), ("all3", "1"), ("all3", "2"), ("all3", "3"), ("spec", "1"), ("spec", "3"), ("lat2", "2"),
                   ("lat2", "3"), ("dflt", "3"), ("named", "1"), ("timed", "1"), ("gpu", "1"), ("slow", "1"), ("stuck", "1"),
                   ("bare", "1"), ("heavy", "1"), ("reshape", "1")])
    check(allv == want, "GET /v2/models/stats lists every served model version: %d %s" % (st.status_code, allv))
    for path, needle in (("/v2/models/nope", "'nope'"), ("/v2/models/nope/config", "'nope'"), ("/v2/models/nope/stats", "'nope'"),
                         ("/v2/models/nope/versions/1", "'nope'"), ("/v2/models/nope/versions/1/config", "'nope'"),
                         ("/v2/models/nope/versions/1/stats", "'nope'"), ("/v2/models/all3/versions/9", "'all3' version 9"),
                         ("/v2/models/all3/versions/9/config", "'all3' version 9"), ("/v2/models/all3/versions/9/stats", "'all3' version 9"),
                         ("/v2/models/spec/versions/2", "'spec' version 2"), ("/v2/models/spec/versions/2/stats", "'spec' version 2")):
        r = get(U, path)
        err = r.json().get("error", "") if r.headers.get("Content-Type", "").startswith("application/json") else ""
        check(r.status_code == 404 and needle in err, "GET %s: 404 with an error naming %s, got %d %s" % (path, needle, r.status_code, r.text[:200]))
    # The backend fields as Triton completes them (AutoCompleteBackendFields): Triton's clients read them.
    for model, platform, filename in (("bare", "onnxruntime_onnx", "model.onnx"), ("named", "onnxruntime_onnx", "net.onnx")):
        cfg = get(U, "/v2/models/%s/config" % model).json()
        check(cfg.get("backend") == "onnxruntime" and cfg.get("platform") == platform and cfg.get("default_model_filename") == filename,
              "GET /v2/models/%s/config: backend onnxruntime, platform %s, default_model_filename %s: %s" % (model, platform, filename, cfg))

    # ---- the same over gRPC: per-version metadata, config, statistics, readiness; NOT_FOUND ------
    stubs = grpc_stubs(SRC, WORK) if "grpc" in srv.ports else None
    if stubs:
        grpc, pb, pb_grpc = stubs
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.ports["grpc"]))
        mm = stub.ModelMetadata(pb.ModelMetadataRequest(name="all3", version="2"), timeout=T)
        check(mm.name == "all3" and list(mm.versions) == ["1", "2", "3"] and mm.platform == "onnxruntime_onnx"
              and [(t.name, t.datatype, list(t.shape)) for t in mm.inputs] == [("x", "FP32", [-1, 4]), ("y", "FP32", [-1, 4])],
              "gRPC ModelMetadata all3 version 2: %s" % mm)
        cfg = stub.ModelConfig(pb.ModelConfigRequest(name="all3", version="2"), timeout=T).config
        check(cfg.name == "all3" and cfg.max_batch_size == 8 and cfg.version_policy.HasField("all") and cfg.backend == "onnxruntime",
              "gRPC ModelConfig all3 version 2: %s" % cfg)
        cfg = stub.ModelConfig(pb.ModelConfigRequest(name="bare"), timeout=T).config
        check(cfg.backend == "onnxruntime" and cfg.platform == "onnxruntime_onnx" and cfg.default_model_filename == "model.onnx",
              "gRPC ModelConfig bare: the backend fields completed: %s" % cfg)
        ms = stub.ModelStatistics(pb.ModelStatisticsRequest(name="all3", version="2"), timeout=T).model_stats
        check(len(ms) == 1 and ms[0].name == "all3" and ms[0].version == "2" and ms[0].inference_count == 2
              and ms[0].inference_stats.success.count == 1, "gRPC ModelStatistics all3 version 2: version 2 alone: %s" % ms)
        ms = stub.ModelStatistics(pb.ModelStatisticsRequest(name="all3"), timeout=T).model_stats
        check(sorted((m.version, m.inference_stats.success.count) for m in ms) == [("1", 1), ("2", 1), ("3", 2)],
              "gRPC ModelStatistics all3: every served version: %s" % ms)
        ms = stub.ModelStatistics(pb.ModelStatisticsRequest(), timeout=T).model_stats
        check(sorted((m.name, m.version) for m in ms) == want, "gRPC ModelStatistics: every served model version: %s" % [(m.name, m.version) for m in ms])
        for model, served in (("all3", (1, 2, 3)), ("spec", (1, 3)), ("lat2", (2, 3)), ("dflt", (3,))):
            got = [v for v in (1, 2, 3) if stub.ModelReady(pb.ModelReadyRequest(name=model, version=str(v)), timeout=T).ready]
            check(got == list(served), "gRPC ModelReady %s: versions %s ready, got %s" % (model, served, got))
        check(not stub.ModelReady(pb.ModelReadyRequest(name="nope"), timeout=T).ready, "gRPC ModelReady of an unknown model: not ready")
        for rpc, request in (("ModelMetadata", pb.ModelMetadataRequest), ("ModelConfig", pb.ModelConfigRequest),
                             ("ModelStatistics", pb.ModelStatisticsRequest)):
            for name, version, needle in (("nope", "", "'nope'"), ("nope", "1", "'nope'"), ("all3", "9", "'all3' version 9"),
                                          ("spec", "2", "'spec' version 2")):
                try:
                    getattr(stub, rpc)(request(name=name, version=version), timeout=T)
                    check(False, "gRPC %s %s version '%s': expected NOT_FOUND, it succeeded" % (rpc, name, version))
                except grpc.RpcError as e:
                    check(e.code() == grpc.StatusCode.NOT_FOUND and needle in e.details(),
                          "gRPC %s %s version '%s': NOT_FOUND naming %s, got %s '%s'" % (rpc, name, version, needle, e.code(), e.details()))

        # The default message limit is Triton's (INT32_MAX), not HTTP's 64 MB: a message just over
        # 64 MB is decoded (and refused for its size against the shape, not by gRPC).
        req = pb.ModelInferRequest(model_name="plain")
        for n in ("x", "y"):
            req.inputs.add(name=n, datatype="FP32", shape=[2, 4])
        req.raw_input_contents.extend([b"\0" * ((64 << 20) + 4), y.tobytes()])
        try:
            stub.ModelInfer(req, timeout=T)
            check(False, "a 64 MB raw input of a [2, 4] tensor: expected INVALID_ARGUMENT, it succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents[0] has %d bytes" % ((64 << 20) + 4) in e.details(),
                  "gRPC's default limit takes a message over 64 MB: %s '%s'" % (e.code(), e.details()[:200]))
        del req

    # ---- default_timeout_microseconds: a request queued past it is rejected --------------------
    t0 = time.time()
    r = infer(U, "timed")
    took = time.time() - t0
    err = r.json().get("error", "") if r.status_code != 200 else ""
    waited = re.search(r"inference request for model 'timed' timed out after waiting (\d+) us in the queue \(timeout 200000 us\)", err)
    check(r.status_code == 503 and waited is not None and int(waited.group(1)) >= 200000,
          "default_timeout_microseconds 200000: 503 naming the wait and the timeout: %d %s" % (r.status_code, r.text[:300]))
    check(took < 2.9, "the timeout fires before max_queue_delay (3 s): %.2f s" % took)
    st = get(U, "/v2/models/timed/stats").json()["model_stats"][0]["inference_stats"]
    check(st["fail"]["count"] == 1 and st["success"]["count"] == 0, "timed: one failure, no success: %s" % st)

    # ---- /metrics: compute and queue time, the process's CPU, memory and descriptors, failures ---
    def scrape():
        return requests.get("http://127.0.0.1:%d/metrics" % srv.metrics_port, timeout=T).text

    hx = np.random.default_rng(5).standard_normal((256, 16)).astype(np.float32)
    hbody = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [256, 16], "data": hx.flatten().tolist()}]})
    heavy = 'model="heavy",version="1"'
    cpu0 = metric(scrape(), "process_cpu_seconds_total")
    t0, wall = time.time(), 0.0
    for _ in range(6):  # one at a time: none waits behind another
        t1 = time.time()
        r = requests.post(U + "/v2/models/heavy/infer", data=hbody, timeout=T)
        wall += time.time() - t1
        check(r.status_code == 200, "heavy answers: %d %s" % (r.status_code, r.text[:200]))
    elapsed = time.time() - t0
    m = scrape()
    compute = (metric(m, "ferry_inference_compute_infer_duration_us", heavy) or 0) / 1e6
    queue = metric(m, "ferry_inference_queue_duration_us", heavy)
    cpu = metric(m, "process_cpu_seconds_total")
    # The model's run is most of each request (340 M multiply-adds against a 16 KB JSON body).
    check(0.4 * wall <= compute <= wall, "compute_infer_duration_us of 6 requests: %.3f s, within 40-100%% of their %.3f s at the client" % (compute, wall))
    check(queue is not None and queue / 1e6 < compute, "queue_duration_us of requests sent one at a time: %s us, under the compute's %.3f s" % (queue, compute))
    check(cpu0 is not None and cpu is not None and 0.25 * compute <= cpu - cpu0 <= elapsed * (os.cpu_count() or 1) + 0.05,
          "process_cpu_seconds_total grew by %s s over %.3f s of compute (%.3f s wall)" % (cpu is not None and cpu0 is not None and cpu - cpu0, compute, elapsed))

    def proc_status():
        with open("/proc/%d/status" % srv.proc.pid) as f:
            return {k: v.split() for k, v in (line.split(":", 1) for line in f)}

    fds0, st0 = len(os.listdir("/proc/%d/fd" % srv.proc.pid)), proc_status()
    m = scrape()
    fds1, st1 = len(os.listdir("/proc/%d/fd" % srv.proc.pid)), proc_status()
    rss, vsz, fds = metric(m, "process_resident_memory_bytes"), metric(m, "process_virtual_memory_bytes"), metric(m, "process_open_fds")
    rss_kb = sorted(int(s["VmRSS"][0]) for s in (st0, st1))
    vsz_kb = sorted(int(s["VmSize"][0]) for s in (st0, st1))
    check(rss is not None and 0.9 * rss_kb[0] * 1024 <= rss <= 1.1 * rss_kb[1] * 1024,
          "process_resident_memory_bytes %s against /proc's VmRSS %s kB" % (rss, rss_kb))
    check(vsz is not None and 0.9 * vsz_kb[0] * 1024 <= vsz <= 1.1 * vsz_kb[1] * 1024,
          "process_virtual_memory_bytes %s against /proc's VmSize %s kB" % (vsz, vsz_kb))
    # (the server counts the scrape's own connection, which /proc's reads before and after miss)
    check(fds is not None and min(fds0, fds1) - 1 <= fds <= max(fds0, fds1) + 2, "process_open_fds %s against /proc's %d, %d" % (fds, fds0, fds1))

    # BACKEND: 4 values pass the config's dims [-1] and fail in the model's Reshape to [2, 3].
    r = requests.post(U + "/v2/models/reshape/infer", timeout=T,
                      data=json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}))
    check(r.status_code >= 400 and "cannot reshape" in r.json().get("error", ""), "reshape of 4 values fails in the run: %d %s" % (r.status_code, r.text[:300]))
    m = scrape()
    check(metric(m, "ferry_inference_request_failure", 'model="reshape",version="1",reason="BACKEND"') == 1,
          "a failure in the model's run is reason BACKEND: %s" % [l for l in m.splitlines() if '"reshape"' in l and "failure" in l])
    check(metric(m, "ferry_inference_request_failure", 'model="timed",version="1",reason="REJECTED"') == 1, "timed's timeout is reason REJECTED")
    # Every failure has its reason: the reasons add up to the statistics' failures; OTHER, which no
    # failure in ferry is (a queued request fails REJECTED, CANCELED or BACKEND), stays 0.
    for ms in get(U, "/v2/models/stats").json()["model_stats"]:
        lab = 'model="%s",version="%s",reason="%%s"' % (ms["name"], ms["version"])
        reasons = {r: metric(m, "ferry_inference_request_failure", lab % r) for r in ("REJECTED", "CANCELED", "BACKEND", "OTHER")}
        check(None not in reasons.values() and sum(reasons.values()) == ms["inference_stats"]["fail"]["count"] and reasons["OTHER"] == 0,
              "%s version %s: failures by reason %s add up to its %d failures, OTHER 0"
              % (ms["name"], ms["version"], reasons, ms["inference_stats"]["fail"]["count"]))

    # ---- ferry perf: percentiles, the server's split, stable, a stepped range, --input .npy -----
    pj, pc = os.path.join(WORK, "perf.json"), os.path.join(WORK, "perf.csv")
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "plain", "--concurrency-range", "1:3:2", "-p", "100",
                        "--max-trials", "3", "--json", pj, "-f", pc], capture_output=True, text=True, timeout=120)
    if check(r.returncode == 0, "ferry perf --concurrency-range 1:3:2: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check([row["concurrency"] for row in rows] == [1, 3], "1:3:2 runs levels 1 and 3: %s" % rows)
        for row in rows:
            check(row["errors"] == 0 and row["requests"] > 0 and 0 < row["p50_us"] <= row["p90_us"] <= row["p99_us"],
                  "perf percentiles p50 <= p90 <= p99: %s" % row)
            check(row["server_queue_us"] >= 0 and row["server_compute_infer_us"] > 0 and row["avg_batch"] == 1.0,
                  "perf: the server's queue / compute split and average batch from its statistics: %s" % row)
            check(isinstance(row["stable"], bool) and row["refused"] is False, "perf: stable is a boolean: %s" % row)
        with open(pc) as f:
            table = list(csv.DictReader(f))
        check([t["Concurrency"] for t in table] == ["1", "3"] and all(t["Stable"] in ("0", "1") for t in table),
              "perf CSV: levels 1 and 3, a Stable column: %s" % table)
        if len(table) == len(rows) == 2:
            for t, row in zip(table, rows):
                check(abs(float(t["Client p99 latency"]) - row["p99_us"]) <= 1e-3 * row["p99_us"] + 1
                      and abs(float(t["Server Compute Infer"]) - row["server_compute_infer_us"]) <= 1e-3 * row["server_compute_infer_us"] + 1
                      and t["Stable"] == ("1" if row["stable"] else "0"),
                      "perf CSV agrees with the JSON: %s vs %s" % (t, row))
    # --input NAME=FILE.npy on an FP32 model; a file of the wrong dtype is refused naming it.
    xf, yf, bad = (os.path.join(WORK, n) for n in ("x.npy", "y.npy", "bad.npy"))
    np.save(xf, x)
    np.save(yf, y)
    np.save(bad, x.astype(np.float64))
    def batches_of_2():
        st = get(U, "/v2/models/plain/stats").json()["model_stats"][0]["batch_stats"]
        return sum(b["compute_infer"]["count"] for b in st if b["batch_size"] == 2)

    before = batches_of_2()
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "plain", "--input", "x=" + xf, "--input", "y=" + yf, "-p", "100",
                        "--max-trials", "3", "--json", pj], capture_output=True, text=True, timeout=120)
    if check(r.returncode == 0, "ferry perf --input x.npy y.npy: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check(len(rows) == 1 and rows[0]["errors"] == 0 and rows[0]["requests"] > 0, "perf --input rows: %s" % rows)
        check(batches_of_2() - before >= rows[0]["requests"],
              "perf --input: the .npy's 2 rows a request reach the server: %d more batches of 2, %d requests" % (batches_of_2() - before, rows[0]["requests"]))
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % srv.port, "-m", "plain", "--input", "x=" + bad, "--input", "y=" + yf],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and bad + ": f64 but input 'x' is FP32" in r.stderr, "perf --input of the wrong dtype: " + r.stderr[-300:])
finally:
    rc = srv.stop()
check(rc == 0, "SIGTERM with nothing queued exits 0, got %s" % rc)

# ---- explicit mode: load / unload B while a client keeps calling A; then the SIGINT drain ------
srv = ServeProcess(FERRY, REPO, "--model-control-mode", "explicit", "--load-model", "plain", "--load-model", "slow")
stop_calls, outcomes = threading.Event(), []
try:
    check(srv.port is not None, "explicit server started: " + srv.log()[-2000:])
    U = srv.url

    def caller():
        while not stop_calls.is_set():
            r = infer(U, "plain")
            outcomes.append((r.status_code, answers_k(r, 1) or r.text[:200]))

    t = threading.Thread(target=caller)
    t.start()
    for i in range(3):
        r = requests.post(U + "/v2/repository/models/all3/load", data=b"", timeout=T)
        check(r.status_code == 200, "load all3 (round %d): %d %s" % (i, r.status_code, r.text[:200]))
        check(answers_k(infer(U, "all3", 2), 2), "all3 version 2 serves after its load (round %d)" % i)
        r = requests.post(U + "/v2/repository/models/all3/unload", data=b"", timeout=T)
        check(r.status_code == 200, "unload all3 (round %d): %d %s" % (i, r.status_code, r.text[:200]))
        check(get(U, "/v2/models/all3/ready").status_code == 400, "all3 not ready after its unload (round %d)" % i)
    n_before_stop = len(outcomes)
    time.sleep(0.1)
    stop_calls.set()
    t.join(30)
    check(n_before_stop >= 3 and all(o == (200, True) for o in outcomes),
          "explicit: every request to 'plain' answered during 3 loads and unloads of 'all3' (%d calls, bad: %s)"
          % (len(outcomes), [o for o in outcomes if o != (200, True)][:3]))

    # SIGINT while a request waits in slow's queue (3 s): drained like SIGTERM, exit 0.
    drained = {}
    t = threading.Thread(target=lambda: drained.setdefault("r", infer(U, "slow")))
    t.start()
    check(wait_pending(srv, "slow", 1), "the request to 'slow' is queued")
    srv.proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    check(get(U, "/v2/health/ready").status_code == 400, "not ready after SIGINT")
    r = infer(U, "plain")
    check(r.status_code == 503 and "shutting down" in r.json().get("error", ""), "new requests 503 after SIGINT: %d %s" % (r.status_code, r.text[:200]))
    t.join(30)
    check("r" in drained and answers_k(drained["r"], 1), "the queued request finishes during the SIGINT drain")
    try:
        rc = srv.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "SIGINT: exit 0 after the drain, got %s" % rc)
    check(re.search(r"SIGINT: not ready; finishing 1 request ", srv.log()) is not None, "the log names SIGINT and the one request it waits for: " + srv.log()[-800:])
finally:
    stop_calls.set()
    srv.kill()

# ---- --exit-timeout-secs 1 with a request that waits 60 s: exit 1 after about a second --------
srv = ServeProcess(FERRY, REPO, "--model-control-mode", "explicit", "--load-model", "stuck", "--exit-timeout-secs", "1")
try:
    check(srv.port is not None, "exit-timeout server started: " + srv.log()[-2000:])
    got = {}

    def stuck_call():
        try:
            got["r"] = infer(srv.url, "stuck")
        except requests.RequestException as e:  # the server exits under it
            got["e"] = e

    t = threading.Thread(target=stuck_call, daemon=True)
    t.start()
    check(wait_pending(srv, "stuck", 1), "the request to 'stuck' is queued")
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        rc = srv.proc.wait(20)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.time() - t0
    check(rc == 1, "an expired --exit-timeout-secs exits 1, got %s" % rc)
    check(took < 15, "it exits long before the queued request's 60 s (%.1f s)" % took)
    t.join(10)
    check(re.search(r"exit timeout expired with 1 request unfinished; exiting", srv.log()) is not None, "the log says the exit timeout expired with its one request: " + srv.log()[-800:])
    check("r" not in got or got["r"].status_code != 200, "the unfinished request got no answer: %s" % got)
finally:
    srv.kill()

print("serve_coverage: %.1f s" % (time.time() - t_start))
if failures:
    print("%d failures" % len(failures))
    sys.exit(1)
print("serve_coverage: all checks passed")

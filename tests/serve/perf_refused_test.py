#!/usr/bin/python3
"""`ferry perf` against a server that refuses every request (issue 35): it stops after the first
window in which requests failed and none succeeded, exits 1 and names the server's reason, instead
of retrying in a tight loop for every window left. A server that refuses only some requests
(overload) is still measured, its rejections counted. The servers are small fakes on 127.0.0.1
(HTTP: http.server answering the KServe v2 metadata and config, every infer 503; gRPC, when the
stubs can be made: UNAVAILABLE, then an OK status with a body that is not a ModelInferResponse),
so each case takes well under a second when ferry perf stops.

usage: perf_refused_test.py FERRY SRC_DIR WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from serve_util import check, failures, grpc_stubs

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
REASON = "Server is draining: try again later"  # the fakes' error message
METADATA = {"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "z", "datatype": "FP32", "shape": [-1, 4]}]}
# Windows of 200 ms, up to 1000 of them, never "stable" (-s 0 with no throughput): without the stop
# a refused run would go on for minutes.
LONG = ["-p", "200", "--max-trials", "1000", "-s", "0"]


class Fake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept-alive connections, as ferry perf's
    refuse_every = 1  # refuse every Nth infer (1: all)
    infers = 0
    lock = threading.Lock()

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v2/models/m":
            self.reply(200, METADATA)
        elif self.path == "/v2/models/m/config":
            self.reply(200, {"name": "m", "max_batch_size": 8})
        else:
            self.reply(404, {"error": "unknown path " + self.path})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Fake.lock:
            Fake.infers += 1
            n = Fake.infers
        if n % Fake.refuse_every == 0:
            self.reply(503, {"error": REASON})
        else:
            self.reply(200, {"model_name": "m", "outputs": [{"name": "z", "datatype": "FP32", "shape": [1, 4], "data": [0, 0, 0, 0]}]})

    def log_message(self, *args):
        pass


def perf(url, *args):
    """Runs ferry perf; returns (CompletedProcess or None when it ran past 60 s, seconds, JSON rows)."""
    out = os.path.join(WORK, "perf.json")
    if os.path.exists(out):
        os.remove(out)
    t0 = time.time()
    try:
        r = subprocess.run([FERRY, "perf", url, "-m", "m", "--json", out, *args], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, time.time() - t0, []
    rows = json.load(open(out)) if os.path.exists(out) else []
    return r, time.time() - t0, rows


def refused_as_expected(what, r, secs, rows, reason_text):
    if not check(r is not None, "%s: ferry perf stops (it ran past 60 s)" % what):
        return
    check(r.returncode == 1, "%s: exit 1, got %d: %s" % (what, r.returncode, r.stderr[-500:]))
    check(secs < 20, "%s: stopped after %.1f s" % (what, secs))
    check("no request succeeded in a 100 ms window at concurrency 2" in r.stderr and reason_text in r.stderr and REASON in r.stderr,
          "%s: the error names the window, the level and the server's reason: %s" % (what, r.stderr[-500:]))
    # The first level was refused: the run stops there (no level 3), its row written with its errors.
    check(len(rows) == 1 and rows[0]["concurrency"] == 2 and rows[0]["refused"] and rows[0]["errors"] > 0 and rows[0]["requests"] == 0,
          "%s: one refused row: %s" % (what, rows))


httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
httpd.daemon_threads = True
threading.Thread(target=httpd.serve_forever, daemon=True).start()
url = "127.0.0.1:%d" % httpd.server_address[1]
try:
    # Every request refused: stopped after the warm-up (half a window), naming the 503 and its message.
    r, secs, rows = perf(url, "--concurrency-range", "2:3", *LONG)
    refused_as_expected("HTTP, every request 503", r, secs, rows, "HTTP 503")
    check(Fake.infers < 200000, "HTTP: %d requests sent before the stop" % Fake.infers)

    # One request in two refused (overload): measured, the rejections counted, exit 1 for them.
    Fake.refuse_every, Fake.infers = 2, 0
    r, secs, rows = perf(url, "-p", "100", "--max-trials", "3")
    if check(r is not None and r.returncode == 1, "HTTP, half refused: exit 1 for the errors: %s" % (r and r.stderr[-500:])):
        check("no request succeeded" not in r.stderr and "first error: HTTP 503" in r.stderr, "half refused: the first error: " + r.stderr[-300:])
        check(len(rows) == 1 and not rows[0]["refused"] and rows[0]["requests"] > 0 and rows[0]["errors"] > 0,
              "half refused: measured with its errors: %s" % rows)
finally:
    httpd.shutdown()

stubs = grpc_stubs(SRC, WORK)
if stubs:
    grpc, pb, pb_grpc = stubs

    class Servicer(pb_grpc.GRPCInferenceServiceServicer):
        def ModelMetadata(self, request, context):
            md = lambda t: pb.ModelMetadataResponse.TensorMetadata(name=t["name"], datatype=t["datatype"], shape=t["shape"])
            return pb.ModelMetadataResponse(name="m", versions=["1"], platform="onnxruntime_onnx",
                                            inputs=[md(t) for t in METADATA["inputs"]], outputs=[md(t) for t in METADATA["outputs"]])

        def ModelConfig(self, request, context):
            resp = pb.ModelConfigResponse()
            resp.config.name = "m"
            resp.config.max_batch_size = 8
            return resp

        def ModelInfer(self, request, context):
            context.abort(grpc.StatusCode.UNAVAILABLE, REASON)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        r, secs, rows = perf("127.0.0.1:%d" % port, "-i", "grpc", "--concurrency-range", "2:3", *LONG)
        if r is not None and r.returncode == 2 and "no gRPC client" in r.stderr:
            print("this build of ferry has no gRPC client: the gRPC case is skipped")
        else:
            refused_as_expected("gRPC, every request UNAVAILABLE", r, secs, rows, "gRPC UNAVAILABLE")
    finally:
        server.stop(0)

    # Answers whose body is not a ModelInferResponse (status OK): ferry perf parses each response (the
    # one before, after sending the next request) and counts these as errors, exit 1.
    garbage = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(lambda request, context: b"\xff\xff\xff")})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[garbage])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        r, secs, rows = perf("127.0.0.1:%d" % port, "-i", "grpc", "--concurrency-range", "2:3", *LONG)
        if not (r is not None and r.returncode == 2 and "no gRPC client" in r.stderr) and \
                check(r is not None, "gRPC, bodies that do not parse: ferry perf stops (it ran past 60 s)"):
            check(r.returncode == 1 and "is not a ModelInferResponse" in r.stderr,
                  "gRPC, bodies that do not parse: exit 1, the error says so: %d %s" % (r.returncode, r.stderr[-500:]))
            check(len(rows) >= 1 and rows[0]["errors"] > 0, "gRPC, bodies that do not parse: counted as errors: %s" % rows)
    finally:
        server.stop(0)

if failures:
    print("\n%d failure(s)" % len(failures))
    sys.exit(1)
print("perf_refused: all checks passed")

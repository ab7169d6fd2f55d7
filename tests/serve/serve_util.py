"""What the `ferry serve` end-to-end tests share (serve_http_test.py, serve_grpc_test.py): the
failure list and check(), the small models and config.pbtxt of their repositories, Triton's BYTES
serialization, and the server
process: `ferry serve` on 127.0.0.1 with every port chosen by the system (port 0), the ports read
back from its log, the log kept for the checks, and a SIGTERM stop.
"""
import os
import re
import signal
import struct
import subprocess
import threading
import time

import onnx
from onnx import TensorProto, helper

# ---- checks ---------------------------------------------------------------------------------
failures = []


def check(cond, what):
    """Records `what` as a failure when `cond` is false (the test goes on); returns `cond`."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---- the repository -------------------------------------------------------------------------
def canceled_and_pending(metrics_text, model, version=1):
    """(CANCELED failures, pending requests) of a model version in a /metrics text (None where absent)."""
    c = re.search(r'ferry_inference_request_failure\{model="%s",version="%d",reason="CANCELED"\} (\d+)' % (model, version), metrics_text)
    p = re.search(r'ferry_inference_pending_request_count\{model="%s",version="%d"\} (\d+)' % (model, version), metrics_text)
    return (int(c.group(1)) if c else None, int(p.group(1)) if p else None)


def wait_for(read, want, limit):
    """read() polled every 20 ms until it returns `want` or `limit` seconds pass; its last value."""
    deadline = time.time() + limit
    while read() != want and time.time() < deadline:
        time.sleep(0.02)
    return read()


def add_model(batch_dim="N"):
    """z = x + y, FP32 [batch_dim, 4]."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch_dim, 4])
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [vi("x"), vi("y")], [vi("z")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def relu_model():
    """b = Relu(a), FP32 [2, 3] (no batch axis)."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "relu", [vi("a")], [vi("b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def echo_model():
    """BYTES with a batch axis: t = Identity(s), [N, 2]."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.STRING, ["N", 2])
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "echo", [vi("s")], [vi("t")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def put(repo, name, model, config=None, version=1):
    """Writes repo/name/version/model.onnx and, when given, repo/name/config.pbtxt."""
    d = os.path.join(repo, name, str(version))
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    if config is not None:
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)


# The config.pbtxt of an add_model: % (name, what follows the outputs).
ADD_CONFIG = """name: "%s"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]
%s
"""


def pack_bytes(items):
    """Triton's BYTES serialization: each item a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


def unpack_bytes(buf):
    """The items of a BYTES buffer (pack_bytes' inverse)."""
    out, pos = [], 0
    while pos < len(buf):
        (n,) = struct.unpack_from("<I", buf, pos)
        out.append(bytes(buf[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out


def grpc_stubs(src, work):
    """Python stubs generated now by protoc + grpc_python_plugin from SRC/serve/grpc_service.proto
    into WORK/stubs; returns (grpc, grpc_service_pb2, grpc_service_pb2_grpc), or None with the reason
    printed when they cannot be made."""
    import shutil
    stubs = os.path.join(work, "stubs")
    os.makedirs(stubs, exist_ok=True)
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        print("no protoc / grpc_python_plugin: the gRPC checks are skipped")
        return None
    r = subprocess.run(["protoc", "-I", src, "--python_out=" + stubs, "--grpc_python_out=" + stubs, "--plugin=protoc-gen-grpc_python=" + plugin,
                        os.path.join(src, "serve", "grpc_service.proto"), os.path.join(src, "serve", "model_config.proto")],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        print("protoc failed:", r.stderr)
        return None
    import sys
    sys.path.insert(0, stubs)
    import grpc
    from serve import grpc_service_pb2, grpc_service_pb2_grpc
    return grpc, grpc_service_pb2, grpc_service_pb2_grpc


# ---- the server process ---------------------------------------------------------------------
class ServeProcess:
    """`ferry serve --model-repository REPO` on 127.0.0.1, HTTP, gRPC and metrics ports chosen by the
    system and read back from the log (ports: "http", "metrics", "grpc" when gRPC is built), `threads`
    compute threads divided between the instances (--threads, 1 by default); `args` go after these. Waits up to `start_seconds` for the
    line naming the HTTP port; `port` stays None when it never came (see log())."""

    def __init__(self, ferry, repo, *args, start_seconds=60, threads=1):
        self.proc = subprocess.Popen([ferry, "serve", "--model-repository", repo, "--http-address", "127.0.0.1", "--http-port", "0",
                                      "--grpc-port", "0", "--metrics-port", "0", "--threads", str(threads), *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.ports = {}
        self.port = self.metrics_port = None
        started = threading.Event()

        def pump():  # the log, line by line, until the process closes it; the ports as they are named
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.ports["grpc"] = int(m.group(1))
                m = re.search(r"HTTP on 127\.0\.0\.1:(\d+), metrics on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
                    self.ports["http"], self.ports["metrics"] = self.port, self.metrics_port
                    started.set()
            started.set()

        threading.Thread(target=pump, daemon=True).start()
        started.wait(start_seconds)
        self.url = "http://127.0.0.1:%s" % self.port

    def log(self):
        """Everything the server logged so far."""
        return "".join(self.lines)

    def stop(self):
        """SIGTERM (the drain), SIGKILL after 30 s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self):
        """SIGKILL when still running (a test's last cleanup)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

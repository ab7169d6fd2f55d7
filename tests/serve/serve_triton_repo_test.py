#!/usr/bin/python3
"""A Triton model repository served unchanged (issue 35): Triton's quick-start densenet_onnx
config.pbtxt (scaled to 2x2 images) with its `format: FORMAT_NCHW`, input `reshape` (dims [3,2,2],
the model's [1,3,2,2]) and output `reshape` (the model's [1,1000,1,1], dims [1000]) and its
label_filename; a batching model with `dims: [1] reshape { shape: [] }`; reshapes that disagree
with their dims or with the model fail the load, naming the model, config.pbtxt, the tensor, both
shapes and the fix. Over HTTP (JSON, binary, classification) and gRPC (stubs generated now).

usage: serve_triton_repo_test.py FERRY SRC_DIR WORKDIR
"""
import json
import os
import shutil
import sys
import threading

import numpy as np
import requests
from onnx import TensorProto, helper, numpy_helper

from serve_util import ServeProcess, check, failures, grpc_stubs, put

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# ---- the repository -------------------------------------------------------------------------
rng = np.random.default_rng(35)
W = rng.standard_normal((1000, 3, 2, 2)).astype(np.float32)
B = rng.standard_normal(1000).astype(np.float32)


def densenet_model():
    """A 2x2 stand-in for densenet: data_0 [1,3,2,2] -> Conv 2x2 -> fc6_1 [1,1000,1,1]."""
    g = helper.make_graph([helper.make_node("Conv", ["data_0", "w", "b"], ["fc6_1"], kernel_shape=[2, 2])], "densenet",
                          [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, 2, 2])],
                          [helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, [1, 1000, 1, 1])],
                          [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def expected(x):  # the model in NumPy: x [3,2,2] -> [1000]
    return (W.reshape(1000, 12) @ x.reshape(12)) + B


# Triton's quick-start docs/examples/model_repository/densenet_onnx/config.pbtxt, images 2x2.
DENSENET = """name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size : 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, %s ]
    reshape { shape: [ 1, 3, %s ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
"""
REPO = os.path.join(WORK, "repo")
put(REPO, "densenet_onnx", densenet_model(), DENSENET % ("2, 2", "2, 2"))
LABELS = ["class_%d" % i for i in range(1000)]


def neg_model():  # y = -x, [N]: a batch axis and nothing else
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N"])
    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg", [vi("x")], [vi("y")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


put(REPO, "neg", neg_model(), """max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 3000000 }
""")
# Bad: the reshape holds 18 elements, dims 12; the reshape [1,3,4,1] holds 12 but is not the model's.
put(REPO, "badcount", densenet_model(), (DENSENET % ("2, 2", "2, 3")).replace("densenet_onnx", "badcount"))
put(REPO, "badshape", densenet_model(), (DENSENET % ("2, 2", "4, 1")).replace("densenet_onnx", "badshape"))
for name in ("densenet_onnx", "badcount", "badshape"):
    with open(os.path.join(REPO, name, "densenet_labels.txt"), "w") as f:
        f.write("\n".join(LABELS) + "\n")

# ---- the server -----------------------------------------------------------------------------
srv = ServeProcess(FERRY, REPO, "--exit-on-error=false")
try:
    check(srv.port is not None, "server started: " + srv.log()[-2000:])
    U = srv.url
    log = srv.log()
    check(not [l for l in log.splitlines() if "warning" in l and "densenet_onnx" in l],
          "Triton's densenet_onnx config loads without a warning (reshape, format are fields ferry reads): " + log[-1500:])
    check("loaded model 'densenet_onnx'" in log and "loaded model 'neg'" in log, "both good models load: " + log[-1500:])

    # Metadata: the dims (what clients send and receive); the config: the reshape as given.
    md = requests.get(U + "/v2/models/densenet_onnx", timeout=30).json()
    check(md["inputs"] == [{"name": "data_0", "datatype": "FP32", "shape": [3, 2, 2]}]
          and md["outputs"] == [{"name": "fc6_1", "datatype": "FP32", "shape": [1000]}], "metadata shows dims: %s" % md)
    cfg = requests.get(U + "/v2/models/densenet_onnx/config", timeout=30).json()
    check(cfg["input"][0]["reshape"] == {"shape": [1, 3, 2, 2]} and cfg["input"][0]["format"] == "FORMAT_NCHW"
          and cfg["output"][0]["reshape"] == {"shape": [1, 1000, 1, 1]} and cfg["output"][0]["dims"] == [1000],
          "config shows the reshapes as given: %s" % json.dumps(cfg)[:600])

    x = rng.standard_normal((3, 2, 2)).astype(np.float32)
    want = expected(x)
    # JSON.
    body = {"inputs": [{"name": "data_0", "datatype": "FP32", "shape": [3, 2, 2], "data": x.flatten().tolist()}]}
    r = requests.post(U + "/v2/models/densenet_onnx/infer", data=json.dumps(body), timeout=30)
    if check(r.status_code == 200, "JSON infer: %d %s" % (r.status_code, r.text[:300])):
        out = r.json()["outputs"][0]
        got = np.array(out["data"], np.float32)
        check(out["shape"] == [1000], "JSON output shape is dims [1000]: %s" % out["shape"])
        check(np.allclose(got, want, rtol=1e-4, atol=1e-4), "JSON output values: max diff %g" % np.abs(got - want).max())
    # A request in the model's shape (not dims) is refused, naming dims.
    bad = {"inputs": [{"name": "data_0", "datatype": "FP32", "shape": [1, 3, 2, 2], "data": x.flatten().tolist()}]}
    r = requests.post(U + "/v2/models/densenet_onnx/infer", data=json.dumps(bad), timeout=30)
    check(r.status_code == 400 and "expected [3,2,2], got [1,3,2,2]" in r.text, "the model's shape is not dims: %d %s" % (r.status_code, r.text[:300]))
    # Binary.
    hdr = json.dumps({"inputs": [{"name": "data_0", "datatype": "FP32", "shape": [3, 2, 2], "parameters": {"binary_data_size": 48}}],
                      "outputs": [{"name": "fc6_1", "parameters": {"binary_data": True}}]}).encode()
    r = requests.post(U + "/v2/models/densenet_onnx/infer", data=hdr + x.tobytes(), timeout=30,
                      headers={"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"})
    if check(r.status_code == 200, "binary infer: %d %s" % (r.status_code, r.text[:300])):
        n = int(r.headers["Inference-Header-Content-Length"])
        head = json.loads(r.content[:n])
        got = np.frombuffer(r.content[n:], np.float32)
        check(head["outputs"][0]["shape"] == [1000] and got.size == 1000, "binary output shape [1000]: %s" % head)
        check(got.size == 1000 and np.allclose(got, want, rtol=1e-4, atol=1e-4), "binary output values")
    # Classification (Triton's image_client asks for the top classes): "value:index:label".
    body["outputs"] = [{"name": "fc6_1", "parameters": {"classification": 3}}]
    r = requests.post(U + "/v2/models/densenet_onnx/infer", data=json.dumps(body), timeout=30)
    if check(r.status_code == 200, "classification: %d %s" % (r.status_code, r.text[:300])):
        out = r.json()["outputs"][0]
        top = np.argsort(-want)[:3]
        idx = [int(s.split(":")[1]) for s in out["data"]]
        labels = [s.split(":")[2] for s in out["data"]]
        check(out["shape"] == [3] and idx == top.tolist() and labels == [LABELS[i] for i in top],
              "top 3 classes with labels: %s, want %s" % (out, top.tolist()))

    # The batching model: dims [1], the model's tensors [N].
    v = np.array([[1.5], [-2.0], [3.25]], np.float32)
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 1], "data": v.flatten().tolist()}]}
    r = requests.post(U + "/v2/models/neg/infer", data=json.dumps(body), timeout=30)
    if check(r.status_code == 200, "neg infer: %d %s" % (r.status_code, r.text[:300])):
        out = r.json()["outputs"][0]
        check(out["shape"] == [3, 1] and out["data"] == (-v).flatten().tolist(), "dims [1] <-> reshape []: %s" % out)
    # Two requests merged into one execution of 3 rows: each gets its own rows back, shaped as dims.
    results = {}

    def send(k, rows):
        b = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows.shape[0], 1], "data": rows.flatten().tolist()}]}
        results[k] = requests.post(U + "/v2/models/neg/infer", data=json.dumps(b), timeout=30)

    parts = [np.array([[7.0]], np.float32), np.array([[8.0], [9.5]], np.float32)]
    threads = [threading.Thread(target=send, args=(k, p)) for k, p in enumerate(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, p in enumerate(parts):
        r = results[k]
        check(r.status_code == 200 and r.json()["outputs"][0]["shape"] == [p.shape[0], 1] and r.json()["outputs"][0]["data"] == (-p).flatten().tolist(),
              "merged request %d: %d %s" % (k, r.status_code, r.text[:300]))
    st = requests.get(U + "/v2/models/neg/stats", timeout=30).json()["model_stats"][0]
    check(st["execution_count"] == 2 and st["inference_count"] == 6, "one execution of 3 merged rows (and the first of 3): %s" % st)
    md = requests.get(U + "/v2/models/neg", timeout=30).json()
    check(md["inputs"][0]["shape"] == [-1, 1] and md["outputs"][0]["shape"] == [-1, 1], "neg metadata [-1,1]: %s" % md)

    # Bad reshapes: the load fails, the index lists the reason.
    index = {m["name"]: m for m in requests.post(U + "/v2/repository/index", data="{}", timeout=30).json()}
    for name, needle in (("badcount", "badcount/config.pbtxt: input 'data_0': dims [3,2,2] and reshape { shape: [1,3,2,3] } hold 12 and 18 elements"),
                         ("badshape", "badshape/config.pbtxt: input 'data_0': reshape { shape: [1,3,4,1] } (dims [3,2,2]) but the model's "
                                      "input has dims [1,3,2,2]; the reshape is the shape the model takes: write reshape { shape: [1,3,2,2] }")):
        m = index.get(name, {})
        check(m.get("state") == "UNAVAILABLE" and needle in m.get("reason", ""), "%s is UNAVAILABLE with '%s': %s" % (name, needle, m))
        check(needle in srv.log(), "%s: the log names the failure: %s" % (name, srv.log()[-1500:]))

    # gRPC: metadata shows dims, ModelInfer returns [1000], ModelConfig the reshapes.
    stubs = grpc_stubs(SRC, WORK)
    if stubs and "grpc" in srv.ports:
        grpc, pb, pb_grpc = stubs
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.ports["grpc"]))
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="densenet_onnx"), timeout=30)
        check(list(meta.inputs[0].shape) == [3, 2, 2] and list(meta.outputs[0].shape) == [1000], "gRPC metadata: %s" % meta)
        req = pb.ModelInferRequest(model_name="densenet_onnx")
        req.inputs.add(name="data_0", datatype="FP32", shape=[3, 2, 2])
        req.raw_input_contents.append(x.tobytes())
        resp = stub.ModelInfer(req, timeout=30)
        got = np.frombuffer(resp.raw_output_contents[0], np.float32)
        check(list(resp.outputs[0].shape) == [1000] and np.allclose(got, want, rtol=1e-4, atol=1e-4),
              "gRPC infer: shape %s" % list(resp.outputs[0].shape))
        c = stub.ModelConfig(pb.ModelConfigRequest(name="densenet_onnx"), timeout=30).config
        check(list(c.input[0].reshape.shape) == [1, 3, 2, 2] and list(c.output[0].reshape.shape) == [1, 1000, 1, 1]
              and c.input[0].format == 2, "gRPC config: %s" % c)
    elif stubs:
        check(False, "the server named no gRPC port: " + srv.log()[-800:])
finally:
    check(srv.stop() == 0, "SIGTERM exits 0")

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("serve_triton_repo: ok")

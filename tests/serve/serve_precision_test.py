#!/usr/bin/python3
"""`ferry serve`'s config.pbtxt parameter "precision" (issue 35): an .onnx model served in a precision
mode answers what `ferry run --precision MODE` answers in process (and differs from fp32 within the
mode's tolerance), a .ferry file compiled in that mode serves when the parameter agrees and is
UNAVAILABLE naming both modes when it does not, an unknown mode is UNAVAILABLE naming the model, the
field, the value and the accepted modes, and the config (HTTP and gRPC) shows the parameter as given.
One server on 127.0.0.1, ports the system picks.

usage: serve_precision_test.py FERRY SRC_DIR WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

from serve_util import ServeProcess, check, failures, grpc_stubs

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
T = 30  # seconds, every call

# z = x @ W + B, FP32 [N, 16] -> [N, 8]: weights whose fp16 / bf16 rounding shows in the outputs.
rng = np.random.default_rng(7)
W = rng.standard_normal((16, 8)).astype(np.float32)
B = rng.standard_normal(8).astype(np.float32)
graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["z"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 8])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
MODEL = os.path.join(WORK, "mm.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), MODEL)

CONFIG = """name: "%s"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "z" data_type: TYPE_FP32 dims: [ 8 ] } ]
%s
"""
REPO = os.path.join(WORK, "repo")


def put(name, precision, file="model.onnx", source=MODEL):
    os.makedirs(os.path.join(REPO, name, "1"))
    shutil.copy(source, os.path.join(REPO, name, "1", file))
    params = 'parameters { key: "precision" value { string_value: "%s" } }' % precision if precision is not None else ""
    with open(os.path.join(REPO, name, "config.pbtxt"), "w") as f:
        f.write(CONFIG % (name, params))


def compile_ferry(mode):
    out = os.path.join(WORK, "mm_%s.ferry" % mode)
    r = subprocess.run([FERRY, "compile", MODEL, "-o", out, "--dynamic-batch", "1,2,4", "--precision-mode", mode],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "ferry compile --precision-mode %s: %s" % (mode, r.stderr))
    return out


put("fp32", None)
put("fp16", "fp16")
put("bf16", "force_bf16")
put("mix", "allow_mix_precision")
put("bad", "int4")
put("empty", "")
put("ferry_fp16", "force_fp16", "model.ferry", compile_ferry("fp16"))
FP32_FERRY = compile_ferry("fp32")
put("ferry_mismatch", "fp16", "model.ferry", FP32_FERRY)
os.makedirs(os.path.join(REPO, "ferry_bare", "1"))  # a compiled model without config.pbtxt
shutil.copy(FP32_FERRY, os.path.join(REPO, "ferry_bare", "1", "model.ferry"))

x = rng.standard_normal((3, 16)).astype(np.float32)
X = os.path.join(WORK, "x.npy")
np.save(X, x)


def in_process(mode):
    """`ferry run --precision MODE` on the .onnx model: the reference."""
    out = os.path.join(WORK, "run_" + mode)
    r = subprocess.run([FERRY, "run", MODEL, "--input", "x=" + X, "--output-dir", out, "--precision", mode, "--threads", "1"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "ferry run --precision %s: %s" % (mode, r.stderr))
    return np.load(os.path.join(out, "z.npy")) if r.returncode == 0 else None


srv = ServeProcess(FERRY, REPO, "--exit-on-error=false")
U = srv.url
try:
    if not check(srv.port is not None, "the server started: " + srv.log()[-2000:]):
        raise SystemExit

    def infer(model):
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.flatten().tolist()}]}
        r = requests.post(U + "/v2/models/%s/infer" % model, data=json.dumps(body), timeout=T)
        if not check(r.status_code == 200, "%s answers: %d %s" % (model, r.status_code, r.text)):
            return None
        return np.array(r.json()["outputs"][0]["data"], np.float32).reshape(3, 8)

    exact = x @ W + B  # float64-free numpy fp32: the fp32 answer up to summation order
    z32 = infer("fp32")
    check(z32 is not None and np.allclose(z32, exact, rtol=1e-5, atol=1e-5), "fp32 serves the fp32 answer")
    scale = float(np.abs(exact).max())
    # A mode's tolerance against fp32, relative to the largest output: twice its unit roundoff (fp16 2^-11, bf16 2^-8).
    for model, mode, tol in (("fp16", "fp16", 1e-3), ("bf16", "force_bf16", 8e-3), ("mix", "allow_mix_precision", 1e-3),
                             ("ferry_fp16", "fp16", 1e-3)):
        z = infer(model)
        ref = in_process(mode)
        if z is None or ref is None or z32 is None:
            continue
        check(np.allclose(z, ref, rtol=1e-6, atol=1e-6 * scale),
              "%s answers what `ferry run --precision %s` answers in process: max diff %g" % (model, mode, np.abs(z - ref).max()))
        diff = float(np.abs(z - z32).max())
        check(0 < diff <= tol * scale, "%s differs from fp32 by %g, within its tolerance %g (and not 0: the mode is applied)" % (model, diff, tol * scale))

    idx = {m["name"]: m for m in requests.post(U + "/v2/repository/index", data="{}", timeout=T).json()}
    for name in ("fp32", "fp16", "bf16", "mix", "ferry_fp16"):
        check(idx.get(name, {}).get("state") == "READY", "%s is READY: %s" % (name, idx.get(name)))
    reason = idx.get("bad", {}).get("reason", "")
    check(idx.get("bad", {}).get("state") == "UNAVAILABLE" and "model 'bad'" in reason and 'bad/config.pbtxt: parameters "precision"' in reason
          and "unknown precision mode 'int4'" in reason and "force_fp32" in reason and "allow_mix_precision_bf16" in reason,
          "an unknown mode is UNAVAILABLE naming the model, the field, the value and the accepted modes: %s" % idx.get("bad"))
    check(idx.get("empty", {}).get("state") == "UNAVAILABLE" and "unknown precision mode ''" in idx["empty"].get("reason", ""),
          "an empty mode is refused: %s" % idx.get("empty"))
    reason = idx.get("ferry_mismatch", {}).get("reason", "")
    check(idx.get("ferry_mismatch", {}).get("state") == "UNAVAILABLE" and 'ferry_mismatch/config.pbtxt: parameters "precision" is \'fp16\' (force_fp16): ' in reason
          and os.path.join(REPO, "ferry_mismatch", "1", "model.ferry") + ": compiled with precision mode 'force_fp32', asked for 'force_fp16'" in reason
          and "ferry compile --precision-mode force_fp16" in reason,
          "a .ferry file compiled in another mode is UNAVAILABLE naming the field, the file, both modes and what to do: %s" % idx.get("ferry_mismatch"))
    r = requests.post(U + "/v2/models/bad/infer", data="{}", timeout=T)
    check(r.status_code in (400, 404, 503), "the unavailable model does not answer: %d" % r.status_code)

    r = requests.get(U + "/v2/models/bf16/config", timeout=T)
    check(r.status_code == 200 and r.json().get("parameters", {}).get("precision") == {"string_value": "force_bf16"},
          "GET config shows the parameter as given: " + r.text)
    check(not any('parameters "precision"' in l and "ignored" in l for l in srv.lines), "precision is not warned about as an unknown parameter")
    # Triton's completion of the backend fields: a .ferry file without a config gets backend "ferry"
    # and no platform (the metadata's platform is then the backend, as Triton's).
    r = requests.get(U + "/v2/models/ferry_bare/config", timeout=T)
    check(r.status_code == 200 and r.json().get("backend") == "ferry" and r.json().get("platform", "") == ""
          and r.json().get("default_model_filename") == "model.ferry", "a bare .ferry's config: backend ferry: " + r.text[:400])
    r = requests.get(U + "/v2/models/ferry_bare", timeout=T)
    check(r.status_code == 200 and r.json().get("platform") == "ferry", "a bare .ferry's metadata: platform ferry: " + r.text[:400])
    stubs = grpc_stubs(SRC, WORK) if "grpc" in srv.ports else None
    if stubs:
        grpc, pb, pb_grpc = stubs
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.ports["grpc"]))
        cfg = stub.ModelConfig(pb.ModelConfigRequest(name="fp16"), timeout=T).config
        check(cfg.parameters["precision"].string_value == "fp16", "gRPC ModelConfig shows the parameter as given: %s" % cfg.parameters)
        cfg = stub.ModelConfig(pb.ModelConfigRequest(name="ferry_bare"), timeout=T).config
        check(cfg.backend == "ferry" and cfg.platform == "" and cfg.default_model_filename == "model.ferry",
              "gRPC ModelConfig of a bare .ferry: backend ferry: %s" % cfg)
    check(srv.stop() == 0, "the server stops")
finally:
    srv.stop()
    srv.kill()

if failures:
    print("\n%d failure(s); server log:\n%s" % (len(failures), srv.log()[-4000:]))
    sys.exit(1)
print("serve_precision: all checks passed")

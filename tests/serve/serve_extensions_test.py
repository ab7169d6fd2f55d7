#!/usr/bin/python3
"""`ferry serve`'s Triton protocol extensions beyond the core, over HTTP and gRPC (stubs generated
here from src/serve/grpc_service.proto): classification labels (config.pbtxt label_filename).
One server, 127.0.0.1, ports the system picks, read back from its log.

usage: serve_extensions_test.py FERRY SRC_DIR WORKDIR
"""
import json
import os
import shutil
import sys

import numpy as np
import requests

from serve_util import ADD_CONFIG, ServeProcess, add_model, check, failures, grpc_stubs, put, unpack_bytes

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
T = 30  # seconds, every call

# ---- the repository -------------------------------------------------------------------------
REPO = os.path.join(WORK, "repo")
LABELED = ADD_CONFIG.replace('output [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]',
                             'output [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "%s" } ]')
put(REPO, "labeled", add_model(), LABELED % ("labeled", "labels.txt", ""))
with open(os.path.join(REPO, "labeled", "labels.txt"), "w", newline="") as f:
    f.write("cat\ndog\r\n\nbird\n")  # class 2 has an empty line: no label
put(REPO, "nolabels", add_model(), LABELED % ("nolabels", "missing.txt", ""))
put(REPO, "escapes", add_model(), LABELED % ("escapes", "../labeled/labels.txt", ""))

srv = ServeProcess(FERRY, REPO, "--exit-on-error=false")
U = srv.url
try:
    if not check(srv.port is not None, "the server started: " + srv.log()[-2000:]):
        raise SystemExit
    stubs = grpc_stubs(SRC, WORK) if "grpc" in srv.ports else None
    check("grpc" not in srv.ports or stubs is not None, "the gRPC stubs could be generated")

    # ---- classification labels: "value:index:label" -------------------------------------
    xc = np.array([[1, 5, 3, 2], [0, -1, 7, 7]], np.float32)
    want = ["5.000000:1:dog", "3.000000:2", "7.000000:2", "7.000000:3:bird"]  # class 2's line is empty: no label
    body = {"inputs": [{"name": n, "datatype": "FP32", "shape": [2, 4], "data": a.flatten().tolist()} for n, a in (("x", xc), ("y", 0 * xc))],
            "outputs": [{"name": "z", "parameters": {"classification": 2}}]}
    r = requests.post(U + "/v2/models/labeled/infer", data=json.dumps(body), timeout=T)
    o = r.json()["outputs"][0] if r.status_code == 200 else {}
    check(o.get("datatype") == "BYTES" and o.get("shape") == [2, 2] and o.get("data") == want, "HTTP classification with labels: " + r.text)
    body["outputs"] = [{"name": "z", "parameters": {"classification": 1, "binary_data": True}}]
    r = requests.post(U + "/v2/models/labeled/infer", data=json.dumps(body), timeout=T)
    hl = int(r.headers.get("Inference-Header-Content-Length", "0"))
    check(r.status_code == 200 and unpack_bytes(r.content[hl:]) == [b"5.000000:1:dog", b"7.000000:2"], "HTTP binary classification with labels")
    body["outputs"] = [{"name": "z"}]
    r = requests.post(U + "/v2/models/labeled/infer", data=json.dumps(body), timeout=T)
    check(r.status_code == 200 and r.json()["outputs"][0]["data"] == xc.flatten().tolist(), "labels leave plain outputs alone: " + r.text)
    r = requests.get(U + "/v2/models/labeled/config", timeout=T)
    check(r.status_code == 200 and r.json()["output"][0].get("label_filename") == "labels.txt", "the config shows label_filename: " + r.text)
    idx = {m["name"]: m for m in requests.post(U + "/v2/repository/index", data="{}", timeout=T).json()}
    missing = os.path.join(REPO, "nolabels", "missing.txt")
    check(idx.get("nolabels", {}).get("state") == "UNAVAILABLE" and
          "nolabels/config.pbtxt: output 'z': label_filename 'missing.txt': cannot read " + missing in idx["nolabels"].get("reason", ""),
          "a missing labels file makes the model UNAVAILABLE, naming its path: %s" % idx.get("nolabels"))
    check(idx.get("escapes", {}).get("state") == "UNAVAILABLE" and "must be a path inside the model directory" in idx["escapes"].get("reason", ""),
          "a labels path outside the model directory is refused: %s" % idx.get("escapes"))
    if stubs:
        grpc, pb, pb_grpc = stubs
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % srv.ports["grpc"]))
        req = pb.ModelInferRequest(model_name="labeled")
        for n, a in (("x", xc), ("y", 0 * xc)):
            req.inputs.add(name=n, datatype="FP32", shape=[2, 4])
            req.raw_input_contents.append(a.tobytes())
        req.outputs.add(name="z").parameters["classification"].int64_param = 2
        resp = stub.ModelInfer(req, timeout=T)
        check(resp.outputs[0].datatype == "BYTES" and [x.decode() for x in unpack_bytes(resp.raw_output_contents[0])] == want,
              "gRPC classification with labels: %s" % resp.raw_output_contents[:1])
finally:
    srv.stop()
    srv.kill()

if failures:
    print("\n%d failure(s); server log:\n%s" % (len(failures), srv.log()[-4000:]))
    sys.exit(1)
print("serve_extensions: all checks passed")

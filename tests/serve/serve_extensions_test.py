#!/usr/bin/python3
"""`ferry serve`'s Triton protocol extensions beyond the core, over HTTP and gRPC (stubs generated
here from src/serve/grpc_service.proto): classification labels (config.pbtxt label_filename) and
system shared memory (regions of a /dev/shm object registered, inputs read from and outputs written
to them, checked against numpy's answer; every bounds and parameter error; `--allow-client-shm`
off by default; CUDA shared memory refused) and the logging extension (GET/POST /v2/logging, gRPC
LogSettings: verbose lines appear and stop, info lines stop, the format changes; --log-file) and the
trace extension (GET/POST /v2[/models/M]/trace/setting, gRPC TraceSetting: sampled requests'
timestamps in the trace file, in order; rate, count, a model's override). Servers on 127.0.0.1, ports the system picks, read
back from their logs.

usage: serve_extensions_test.py FERRY SRC_DIR WORKDIR
"""
import json
import mmap
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import requests

from serve_util import ADD_CONFIG, ServeProcess, add_model, check, echo_model, failures, grpc_stubs, pack_bytes, put, unpack_bytes

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
put(REPO, "add", add_model(), ADD_CONFIG % ("add", ""))
put(REPO, "echo", echo_model())  # BYTES [N, 2], derived config

# ---- a shared-memory object: a file in /dev/shm, mapped here as the client's view --------------
KEY = "/ferry_shm_test_%d" % os.getpid()
SHM_PATH = "/dev/shm" + KEY
SHM_SIZE = 8192
with open(SHM_PATH, "wb") as f:
    f.truncate(SHM_SIZE)
shm_file = open(SHM_PATH, "r+b")
view = mmap.mmap(shm_file.fileno(), SHM_SIZE)


def put_shm(offset, data):
    view[offset:offset + len(data)] = data


def get_shm(offset, n):
    return bytes(view[offset:offset + n])


def shm_params(region, size, offset=None):
    p = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset is not None:
        p["shared_memory_offset"] = offset
    return p


TRACE = os.path.join(WORK, "trace.jsonl")
srv = ServeProcess(FERRY, REPO, "--exit-on-error=false", "--allow-client-shm", "true", "--trace-file", TRACE)
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

    # ---- system shared memory over HTTP -----------------------------------------------------
    check("system_shared_memory" in requests.get(U + "/v2", timeout=T).json()["extensions"], "GET /v2 lists system_shared_memory")
    SHM = U + "/v2/systemsharedmemory"
    r = requests.post(SHM + "/region/all/register", data=json.dumps({"key": KEY, "offset": 0, "byte_size": SHM_SIZE}), timeout=T)
    check(r.status_code == 200, "register a region: %d %s" % (r.status_code, r.text))
    r = requests.post(SHM + "/region/upper/register", data=json.dumps({"key": KEY, "offset": 4096, "byte_size": 1024}), timeout=T)
    check(r.status_code == 200, "register a region at an offset: %d %s" % (r.status_code, r.text))
    r = requests.get(SHM + "/status", timeout=T)
    check(r.status_code == 200 and sorted(r.json(), key=lambda e: e["name"]) ==
          [{"name": "all", "key": KEY, "offset": 0, "byte_size": SHM_SIZE}, {"name": "upper", "key": KEY, "offset": 4096, "byte_size": 1024}],
          "status of every region: " + r.text)
    r = requests.get(SHM + "/region/upper/status", timeout=T)
    check(r.status_code == 200 and r.json() == [{"name": "upper", "key": KEY, "offset": 4096, "byte_size": 1024}], "status of one region: " + r.text)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    y = rng.standard_normal((2, 4)).astype(np.float32)
    want_z = x + y  # the in-process answer of the add model, exactly
    put_shm(0, x.tobytes())
    put_shm(64, y.tobytes())
    view[128:160] = b"\xff" * 32

    def shm_body(xp, yp, zp=None, **extra):
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "parameters": xp},
                           {"name": "y", "datatype": "FP32", "shape": [2, 4], "parameters": yp}]}
        if zp is not None:
            body["outputs"] = [{"name": "z", "parameters": zp}]
        body.update(extra)
        return json.dumps(body)

    r = requests.post(U + "/v2/models/add/infer", data=shm_body(shm_params("all", 32), shm_params("all", 32, 64), shm_params("all", 32, 128)), timeout=T)
    o = r.json()["outputs"][0] if r.status_code == 200 else {}
    check(r.status_code == 200 and "data" not in o and o.get("shape") == [2, 4] and
          o.get("parameters") == {"shared_memory_region": "all", "shared_memory_byte_size": 32, "shared_memory_offset": 128},
          "HTTP infer with inputs and output in shared memory: " + r.text)
    check(np.array_equal(np.frombuffer(get_shm(128, 32), np.float32).reshape(2, 4), want_z), "the output written into the region is x + y")
    check(get_shm(0, 32) == x.tobytes() and get_shm(64, 32) == y.tobytes(), "the input bytes are left as they were (read in place)")
    # Offsets within a region that starts at 4096 of the object; y at an odd offset (copied, not in place); JSON output.
    put_shm(4096, x.tobytes())
    put_shm(4096 + 36, y.tobytes())
    r = requests.post(U + "/v2/models/add/infer", data=shm_body(shm_params("upper", 32), shm_params("upper", 32, 36)), timeout=T)
    check(r.status_code == 200 and np.array_equal(np.array(r.json()["outputs"][0]["data"], np.float32).reshape(2, 4), want_z),
          "HTTP infer from a region at an object offset, one input unaligned: " + r.text)
    # Mixed: x in shared memory, y as JSON data, z binary.
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "parameters": shm_params("all", 32)},
                       {"name": "y", "datatype": "FP32", "shape": [2, 4], "data": y.flatten().tolist()}],
            "outputs": [{"name": "z", "parameters": {"binary_data": True}}]}
    r = requests.post(U + "/v2/models/add/infer", data=json.dumps(body), timeout=T)
    hl = int(r.headers.get("Inference-Header-Content-Length", "0"))
    check(r.status_code == 200 and np.array_equal(np.frombuffer(r.content[hl:], np.float32).reshape(2, 4), want_z), "HTTP infer, shm + JSON input, binary output")
    # BYTES in and out through shared memory (Triton's serialization: 4-byte lengths).
    items = [b"alpha", b"", b"gamma!", b"d"]
    blob = pack_bytes(items)
    put_shm(2048, blob)
    body = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2, 2], "parameters": shm_params("all", len(blob), 2048)}],
            "outputs": [{"name": "t", "parameters": shm_params("all", 200, 3072)}]}
    r = requests.post(U + "/v2/models/echo/infer", data=json.dumps(body), timeout=T)
    check(r.status_code == 200 and unpack_bytes(get_shm(3072, len(blob))) == items, "HTTP BYTES in and out of shared memory: " + r.text)

    def bad(body, model, status, text, what):
        r = requests.post(U + "/v2/models/%s/infer" % model, data=body if isinstance(body, str) else json.dumps(body), timeout=T)
        err = r.json().get("error", "") if r.headers.get("content-type", "").startswith("application/json") else r.text
        check(r.status_code == status and text in err, "%s: %d %s" % (what, r.status_code, r.text))

    bad(shm_body(shm_params("nope", 32), shm_params("all", 32, 64)), "add", 400, "input 'x': shared_memory_region 'nope' is not registered", "unknown region")
    bad(shm_body(shm_params("all", 32, SHM_SIZE - 16), shm_params("all", 32, 64)), "add", 400,
        "input 'x': shared_memory_offset 8176 + shared_memory_byte_size 32 = 8208 runs past the end of region 'all' (8192 bytes)", "slice past the region")
    bad(shm_body(shm_params("upper", 32, 1000), shm_params("all", 32, 64)), "add", 400, "runs past the end of region 'upper' (1024 bytes)",
        "slice past a region at an offset")
    bad(shm_body(shm_params("all", 16), shm_params("all", 32, 64)), "add", 400,
        "input 'x': shared_memory_byte_size 16 but shape [2,4] of FP32 needs 32 bytes", "size disagreeing with the tensor")
    bad(shm_body({"shared_memory_region": "all"}, shm_params("all", 32, 64)), "add", 400,
        "input 'x': parameter 'shared_memory_byte_size' is missing", "region without a size")
    bad(shm_body({"shared_memory_byte_size": 32}, shm_params("all", 32, 64)), "add", 400,
        "input 'x': parameter 'shared_memory_region' is missing", "size without a region")
    bad(shm_body({"shared_memory_region": 7, "shared_memory_byte_size": 32}, shm_params("all", 32, 64)), "add", 400,
        "'shared_memory_region' is not a string", "a region that is not a string")
    bad(shm_body(shm_params("all", 32), shm_params("all", 32, 64), shm_params("all", 16, 128)), "add", 400,
        "output 'z': 32 bytes do not fit shared_memory_byte_size 16 (region 'all', offset 128)", "output slice too small")
    bad(shm_body(shm_params("all", 32), shm_params("all", 32, 64), dict(shm_params("all", 32, 128), binary_data=True)), "add", 400,
        "output 'z' has shared-memory parameters and also 'binary_data': true", "shm output that also asks for binary")
    both = json.loads(shm_body(shm_params("all", 32), shm_params("all", 32, 64)))
    both["inputs"][0]["data"] = x.flatten().tolist()
    bad(both, "add", 400, "input 'x' has shared-memory parameters and also 'data'; give one", "shm input with data")
    r = requests.post(SHM + "/region/all/register", data=json.dumps({"key": KEY, "offset": 0, "byte_size": 64}), timeout=T)
    check(r.status_code == 400 and "'all' is already registered" in r.json()["error"], "a name registered twice: " + r.text)
    r = requests.post(SHM + "/region/r9/register", data=json.dumps({"key": "/ferry_no_such_object", "offset": 0, "byte_size": 64}), timeout=T)
    check(r.status_code == 400 and "cannot open the shared-memory object '/ferry_no_such_object' (No such file or directory)" in r.json()["error"],
          "an unknown key: " + r.text)
    r = requests.post(SHM + "/region/r9/register", data=json.dumps({"key": KEY, "offset": 8000, "byte_size": 4096}), timeout=T)
    check(r.status_code == 400 and "offset 8000 + byte_size 4096 = 12096 runs past the end of '%s' (8192 bytes)" % KEY in r.json()["error"],
          "a region past the object's end: " + r.text)
    r = requests.post(SHM + "/region/r9/register", data='{"key": 5}', timeout=T)
    check(r.status_code == 400 and "'key' is missing or not a string" in r.json()["error"], "a register body without a key: " + r.text)
    r = requests.get(SHM + "/region/r9/status", timeout=T)
    check(r.status_code == 404 and "no system shared-memory region 'r9' is registered" in r.json()["error"], "status of an unknown region: " + r.text)
    r = requests.get(SHM + "/region/all/register", timeout=T)
    check(r.status_code == 405, "register takes POST: %d" % r.status_code)
    # A client that shrinks the object under a registered region gets an error, not a dead server.
    os.truncate(SHM_PATH, 4096)
    bad(shm_body(shm_params("all", 32), shm_params("all", 32, 64)), "add", 400, "was shrunk to 4096 bytes since it was registered", "a shrunk object")
    os.truncate(SHM_PATH, SHM_SIZE)
    # CUDA shared memory: none on this build, said clearly.
    r = requests.post(U + "/v2/cudasharedmemory/region/c0/register", data=json.dumps({"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 64}), timeout=T)
    check(r.status_code == 400 and "CUDA shared memory is not supported by this build of ferry" in r.json()["error"], "CUDA register: " + r.text)
    r = requests.get(U + "/v2/cudasharedmemory/status", timeout=T)
    check(r.status_code == 200 and r.json() == [], "CUDA status lists no region: " + r.text)

    if stubs:
        # ---- the same over gRPC: one namespace with HTTP ------------------------------------
        st = stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=T)
        check(sorted(st.regions) == ["all", "upper"] and st.regions["upper"].offset == 4096 and st.regions["upper"].key == KEY,
              "gRPC status sees the regions registered over HTTP: %s" % st)
        stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="g", key=KEY, offset=0, byte_size=4096), timeout=T)
        check("g" in stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="g"), timeout=T).regions, "gRPC register + status")
        check(any(e == "system_shared_memory" for e in stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=T).extensions),
              "ServerMetadata lists system_shared_memory")

        def grpc_params(t, region, size, offset=0):
            t.parameters["shared_memory_region"].string_param = region
            t.parameters["shared_memory_byte_size"].int64_param = size
            if offset:
                t.parameters["shared_memory_offset"].int64_param = offset

        view[512:544] = b"\0" * 32
        req = pb.ModelInferRequest(model_name="add")
        grpc_params(req.inputs.add(name="x", datatype="FP32", shape=[2, 4]), "g", 32)
        req.inputs.add(name="y", datatype="FP32", shape=[2, 4])
        req.raw_input_contents.append(y.tobytes())  # one raw entry: for y, the only input not in shared memory
        grpc_params(req.outputs.add(name="z"), "g", 32, 512)
        resp = stub.ModelInfer(req, timeout=T)
        o = resp.outputs[0]
        check(list(o.shape) == [2, 4] and o.parameters["shared_memory_region"].string_param == "g" and list(resp.raw_output_contents) == [b""],
              "gRPC infer: the output's place, an empty raw entry: %s" % resp)
        check(np.array_equal(np.frombuffer(get_shm(512, 32), np.float32).reshape(2, 4), want_z), "gRPC: the output written into the region is x + y")

        def grpc_error(req, code, text, what):
            try:
                stub.ModelInfer(req, timeout=T)
                check(False, what + ": no error")
            except grpc.RpcError as e:
                check(e.code() == code and text in e.details(), "%s: %s %s" % (what, e.code(), e.details()))

        req.raw_input_contents.append(y.tobytes())
        grpc_error(req, grpc.StatusCode.INVALID_ARGUMENT, "the request has 2 raw_input_contents for 1 inputs not in shared memory", "gRPC raw count")
        del req.raw_input_contents[1]
        req.inputs[0].parameters["shared_memory_region"].string_param = "nope"
        grpc_error(req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x': shared_memory_region 'nope' is not registered", "gRPC unknown region")
        req.inputs[0].parameters["shared_memory_region"].string_param = "g"
        req.inputs[0].parameters["shared_memory_byte_size"].int64_param = 31
        grpc_error(req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x': shared_memory_byte_size 31 but shape [2,4] of FP32 needs 32 bytes", "gRPC size")
        try:
            stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="g", key=KEY, byte_size=64), timeout=T)
            check(False, "gRPC register twice: no error")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "'g' is already registered" in e.details(), "gRPC register twice: " + e.details())
        try:
            stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="c", byte_size=64), timeout=T)
            check(False, "gRPC CUDA register: no error")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNIMPLEMENTED and "not supported by this build" in e.details(), "gRPC CUDA register: " + e.details())
        check(len(stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(), timeout=T).regions) == 0, "gRPC CUDA status: none")
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="g"), timeout=T)
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="g"), timeout=T)  # again: idempotent
        check("g" not in stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=T).regions, "gRPC unregister")

    # ---- the logging extension: settings read and changed, with effect ------------------------
    check("logging" in requests.get(U + "/v2", timeout=T).json()["extensions"], "GET /v2 lists logging")
    LOG = U + "/v2/logging"
    defaults = {"log_file": "", "log_info": True, "log_warnings": True, "log_errors": True, "log_verbose_level": 0, "log_format": "default"}
    r = requests.get(LOG, timeout=T)
    check(r.status_code == 200 and r.json() == defaults, "GET /v2/logging: " + r.text)

    def verbose_lines():
        return [l for l in srv.lines if "ferry serve: verbose:" in l]

    def wait_for(pred, seconds=5):
        deadline = time.time() + seconds
        while time.time() < deadline and not pred():
            time.sleep(0.02)
        return pred()

    add_body = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [2, 4], "data": a.flatten().tolist()} for n, a in (("x", x), ("y", y))]})
    requests.post(U + "/v2/models/add/infer", data=add_body, timeout=T)
    check(verbose_lines() == [], "no verbose line at level 0")
    r = requests.post(LOG, data=json.dumps({"log_verbose_level": 1}), timeout=T)
    check(r.status_code == 200 and r.json() == dict(defaults, log_verbose_level=1), "POST /v2/logging answers every setting: " + r.text)
    requests.post(U + "/v2/models/add/infer", data=add_body, timeout=T)
    requests.post(U + "/v2/models/nope/infer", data=add_body, timeout=T)
    check(wait_for(lambda: any("verbose: HTTP POST /v2/models/add/infer -> 200" in l for l in verbose_lines()) and
                   any("verbose: HTTP POST /v2/models/nope/infer -> 404" in l and "unknown model" in l for l in verbose_lines())),
          "verbose level 1 logs each request with its answer: %s" % verbose_lines())
    for body, text in (({"log_verbose_level": "high"}, "log setting 'log_verbose_level' is an unsigned 32-bit integer"),
                       ({"log_file": "/tmp/elsewhere.log"}, "log setting 'log_file' cannot be changed while the server runs"),
                       ({"log_format": "json"}, "log_format 'json': expected default or ISO8601"),
                       ({"log_info": False, "log_colour": 1}, "unknown log setting 'log_colour'")):
        r = requests.post(LOG, data=json.dumps(body), timeout=T)
        check(r.status_code == 400 and text in r.json()["error"], "bad log setting %s: %s" % (body, r.text))
    check(requests.get(LOG, timeout=T).json()["log_info"] is True, "a refused request changes nothing (log_info still true)")
    r = requests.post(LOG, data=json.dumps({"log_format": "ISO8601"}), timeout=T)
    requests.post(U + "/v2/models/add/infer", data=add_body, timeout=T)
    check(wait_for(lambda: any(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ferry serve: verbose: HTTP POST", l) for l in srv.lines)),
          "log_format ISO8601 puts the UTC time first: %s" % verbose_lines()[-2:])
    if stubs:
        ls = stub.LogSettings(pb.LogSettingsRequest(settings={"log_format": pb.LogSettingsRequest.SettingValue(string_param="default")}),
                              timeout=T).settings
        check(ls["log_format"].string_param == "default" and ls["log_verbose_level"].uint32_param == 1, "gRPC LogSettings sets and answers: %s" % ls)
        req = pb.ModelInferRequest(model_name="add", id="traced")
        for n, a in (("x", x), ("y", y)):
            req.inputs.add(name=n, datatype="FP32", shape=[2, 4])
            req.raw_input_contents.append(a.tobytes())
        stub.ModelInfer(req, timeout=T)
        check(wait_for(lambda: any("verbose: gRPC ModelInfer model 'add' id 'traced' -> OK" in l for l in verbose_lines())),
              "verbose level 1 logs each gRPC request: %s" % verbose_lines()[-2:])
        try:
            stub.LogSettings(pb.LogSettingsRequest(settings={"log_errors": pb.LogSettingsRequest.SettingValue(uint32_param=3)}), timeout=T)
            check(False, "gRPC LogSettings with a wrong type: no error")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "log setting 'log_errors' is a boolean" in e.details(), "gRPC LogSettings type: " + e.details())
    requests.post(LOG, data=json.dumps({"log_verbose_level": 0, "log_format": "default"}), timeout=T)
    time.sleep(0.3)  # this POST's own verbose line (written before its answer) reaches srv.lines
    n = len(verbose_lines())
    requests.post(U + "/v2/models/add/infer", data=add_body, timeout=T)
    time.sleep(0.3)
    check(len(verbose_lines()) == n, "back at level 0: no more verbose lines")

    # ---- the trace extension: sampled requests' timestamps in the trace file ------------------
    check("trace" in requests.get(U + "/v2", timeout=T).json()["extensions"], "GET /v2 lists trace")
    TS = U + "/v2/trace/setting"

    def traces():
        return [json.loads(l) for l in open(TRACE)] if os.path.exists(TRACE) else []

    r = requests.get(TS, timeout=T)
    check(r.status_code == 200 and r.json() == {"trace_file": TRACE, "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                                                "log_frequency": "0", "trace_mode": "triton"}, "GET /v2/trace/setting: " + r.text)
    requests.post(U + "/v2/models/add/infer", data=add_body, timeout=T)
    check(traces() == [], "nothing traced at level OFF")
    r = requests.post(TS, data=json.dumps({"trace_level": ["TIMESTAMPS"], "trace_rate": "2"}), timeout=T)
    check(r.status_code == 200 and r.json()["trace_level"] == ["TIMESTAMPS"] and r.json()["trace_rate"] == "2", "POST trace settings: " + r.text)
    for i in range(4):
        requests.post(U + "/v2/models/add/infer", data=json.dumps(dict(json.loads(add_body), id="t%d" % i)), timeout=T)
    got = traces()
    order = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
    check([t.get("request_id") for t in got] == ["t0", "t2"] and all(t["model_name"] == "add" and t["model_version"] == 1 for t in got),
          "trace_rate 2: every other request traced: %s" % got)
    check(all([s["name"] for s in t["timestamps"]] == order and [s["ns"] for s in t["timestamps"]] == sorted(s["ns"] for s in t["timestamps"])
              for t in got) and len(got) > 0, "each trace has the steps in order, their times rising: %s" % got[:1])
    # A model's override: labeled is not traced while add is; an empty update removes the override.
    r = requests.post(U + "/v2/models/labeled/trace/setting", data=json.dumps({"trace_level": ["OFF"]}), timeout=T)
    check(r.status_code == 200 and r.json()["trace_level"] == ["OFF"] and r.json()["trace_rate"] == "2", "a model's override copies the rest: " + r.text)
    check(requests.get(TS, timeout=T).json()["trace_level"] == ["TIMESTAMPS"], "the global level is unchanged")
    n = len(traces())
    for i in range(4):
        requests.post(U + "/v2/models/labeled/infer", data=json.dumps(dict(json.loads(add_body), id="l%d" % i)), timeout=T)
    check(len(traces()) == n, "a model whose override is OFF is not traced")
    r = requests.post(U + "/v2/models/labeled/trace/setting", data="{}", timeout=T)
    check(r.status_code == 200 and r.json()["trace_level"] == ["TIMESTAMPS"], "an empty update removes the model's override: " + r.text)
    r = requests.post(TS, data=json.dumps({"trace_rate": "1", "trace_count": "1"}), timeout=T)
    for i in range(3):
        requests.post(U + "/v2/models/add/infer", data=json.dumps(dict(json.loads(add_body), id="c%d" % i)), timeout=T)
    check([t.get("request_id") for t in traces()[n:]] == ["c0"], "trace_count 1: one more trace, then none: %s" % traces()[n:])
    requests.post(TS, data=json.dumps({"trace_count": "1"}), timeout=T)
    requests.post(U + "/v2/models/add/infer", data='{"inputs": 5}', timeout=T)  # refused while it is decoded
    last = traces()[-1]
    check([s["name"] for s in last["timestamps"]] == ["REQUEST_START", "REQUEST_END"] and last["model_name"] == "add",
          "a refused request's trace has its two ends: %s" % last)
    check(requests.get(TS, timeout=T).json()["trace_count"] == "0", "trace_count counts down")
    for body, text in (({"trace_level": ["OFF", "TENSORS"]}, "OFF cannot be listed with another level"),
                       ({"log_frequency": "-1"}, "trace setting 'log_frequency' '-1': give 0"),
                       ({"trace_rate": "0"}, "trace setting 'trace_rate' '0': give a count >= 1"),
                       ({"trace_file": "/tmp/elsewhere"}, "trace setting 'trace_file' cannot be changed while the server runs"),
                       ({"trace_rate": 5}, "give a string"),
                       ({"trace_rate": "7", "tracing": "on"}, "unknown trace setting 'tracing'")):
        r = requests.post(TS, data=json.dumps(body), timeout=T)
        check(r.status_code == 400 and text in r.json().get("error", ""), "bad trace setting %s: %s" % (body, r.text))
    check(requests.get(TS, timeout=T).json()["trace_rate"] == "1", "a refused request changes nothing")
    r = requests.get(U + "/v2/models/nope/trace/setting", timeout=T)
    check(r.status_code == 404, "trace settings of an unknown model: %d %s" % (r.status_code, r.text))
    if stubs:
        ts = stub.TraceSetting(pb.TraceSettingRequest(settings={"trace_count": pb.TraceSettingRequest.SettingValue(value=["-1"])}), timeout=T).settings
        check(list(ts["trace_count"].value) == ["-1"] and list(ts["trace_level"].value) == ["TIMESTAMPS"], "gRPC TraceSetting: %s" % ts)
        req = pb.ModelInferRequest(model_name="add", id="g-traced")
        for nm, a in (("x", x), ("y", y)):
            req.inputs.add(name=nm, datatype="FP32", shape=[2, 4])
            req.raw_input_contents.append(a.tobytes())
        stub.ModelInfer(req, timeout=T)
        last = traces()[-1]
        check(last.get("request_id") == "g-traced" and [s["name"] for s in last["timestamps"]] == order, "a gRPC request traced: %s" % last)

    # TENSORS: after the trace's own line, Triton's records of the inputs as queued and of the outputs.
    def tensor_value(rec):
        t = rec["tensor"]
        return np.array([float(v) for v in t["data"].split(",")], np.float32).reshape([int(d) for d in t["shape"].split(",")])

    def check_tensors(got, rid, what):
        acts = [(g.get("activity"), g.get("tensor", {}).get("name")) for g in got[1:]]
        ok = (len(got) == 4 and got[0].get("request_id") == rid and [s["name"] for s in got[0].get("timestamps", [])] == order and
              acts == [("TENSOR_QUEUE_INPUT", "x"), ("TENSOR_QUEUE_INPUT", "y"), ("TENSOR_BACKEND_OUTPUT", "z")] and
              all(g["id"] == got[0]["id"] and g["tensor"]["dtype"] == "FP32" for g in got[1:]))
        check(ok and np.array_equal(tensor_value(got[1]), x) and np.array_equal(tensor_value(got[2]), y) and
              np.array_equal(tensor_value(got[3]), want_z), "%s: TENSORS records of x, y and z with their values: %s" % (what, got))

    r = requests.post(TS, data=json.dumps({"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "1", "trace_count": "-1"}), timeout=T)
    check(r.status_code == 200 and r.json()["trace_level"] == ["TIMESTAMPS", "TENSORS"], "trace_level TIMESTAMPS and TENSORS: " + r.text)
    n = len(traces())
    requests.post(U + "/v2/models/add/infer", data=json.dumps(dict(json.loads(add_body), id="tensors")), timeout=T)
    check_tensors(traces()[n:], "tensors", "HTTP")
    if stubs:
        n = len(traces())
        req.id = "g-tensors"
        stub.ModelInfer(req, timeout=T)
        check_tensors(traces()[n:], "g-tensors", "gRPC")
    # log_frequency 2: the traces go to TRACE.0, TRACE.1, ..., two a file; 0: back to TRACE.
    r = requests.post(TS, data=json.dumps({"trace_level": ["TIMESTAMPS"], "log_frequency": "2"}), timeout=T)
    check(r.status_code == 200 and r.json()["log_frequency"] == "2", "log_frequency 2: " + r.text)
    n = len(traces())
    for i in range(3):
        requests.post(U + "/v2/models/add/infer", data=json.dumps(dict(json.loads(add_body), id="f%d" % i)), timeout=T)
    indexed = [[json.loads(l).get("request_id") for l in open(TRACE + ".%d" % k)] if os.path.exists(TRACE + ".%d" % k) else None for k in range(3)]
    check(indexed == [["f0", "f1"], ["f2"], None] and len(traces()) == n, "log_frequency 2: two traces a file, TRACE.0 and TRACE.1: %s" % indexed)
    requests.post(TS, data=json.dumps({"log_frequency": "0"}), timeout=T)
    requests.post(U + "/v2/models/add/infer", data=json.dumps(dict(json.loads(add_body), id="f3")), timeout=T)
    check([t.get("request_id") for t in traces()[n:]] == ["f3"], "log_frequency 0 again: the trace file: %s" % traces()[n:])
    requests.post(TS, data=json.dumps({"trace_level": ["OFF"]}), timeout=T)

    # ---- unregister: a region, then all --------------------------------------------------------
    r = requests.post(SHM + "/region/upper/unregister", timeout=T)
    check(r.status_code == 200 and [e["name"] for e in requests.get(SHM + "/status", timeout=T).json()] == ["all"], "unregister one region")
    bad(shm_body(shm_params("upper", 32), shm_params("upper", 32, 36)), "add", 400, "shared_memory_region 'upper' is not registered", "an unregistered region")
    r = requests.post(SHM + "/unregister", timeout=T)
    check(r.status_code == 200 and requests.get(SHM + "/status", timeout=T).json() == [], "unregister every region")
    requests.post(LOG, data=json.dumps({"log_info": False}), timeout=T)  # the stop's info lines go unwritten
    check(srv.stop() == 0, "the server stops")
    check(not any("stopped" in l or "SIGTERM" in l for l in srv.lines), "log_info false: the stop's info lines are not written")
finally:
    srv.stop()
    srv.kill()

# ---- the defaults: client shared memory off (as Triton since 26.04); --log-file, --log-verbose -----
LOGFILE = os.path.join(WORK, "serve.log")
off = subprocess.Popen([FERRY, "serve", "--model-repository", REPO, "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                        "--metrics-port", "0", "--threads", "1", "--exit-on-error=false", "--log-file", LOGFILE, "--log-verbose", "1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def logfile():
    return open(LOGFILE).read() if os.path.exists(LOGFILE) else ""


try:
    deadline = time.time() + 60
    while time.time() < deadline and off.poll() is None and not re.search(r"HTTP on 127\.0\.0\.1:(\d+)", logfile()):
        time.sleep(0.05)
    m = re.search(r"HTTP on 127\.0\.0\.1:(\d+)", logfile())
    if check(m is not None, "--log-file: the log goes to the file: " + logfile()[-1000:]):
        url = "http://127.0.0.1:" + m.group(1)
        r = requests.post(url + "/v2/systemsharedmemory/region/all/register", data=json.dumps({"key": KEY, "offset": 0, "byte_size": 64}), timeout=T)
        check(r.status_code == 400 and "start the server with `--allow-client-shm true`" in r.json()["error"], "registering is off by default: " + r.text)
        r = requests.post(url + "/v2/models/add/infer", data=shm_body(shm_params("all", 32), shm_params("all", 32, 64)), timeout=T)
        check(r.status_code == 400 and "--allow-client-shm true" in r.json()["error"], "naming a region when it is off: " + r.text)
        check(requests.get(url + "/v2/logging", timeout=T).json()["log_file"] == LOGFILE, "log_file is the --log-file")
        r = requests.post(url + "/v2/trace/setting", data=json.dumps({"trace_level": ["TIMESTAMPS"]}), timeout=T)
        check(r.status_code == 400 and "no trace file; start `ferry serve --trace-file PATH`" in r.json()["error"], "tracing without a trace file: " + r.text)
    off.send_signal(signal.SIGTERM)
    off.wait(30)
    text = logfile()
    check("verbose: HTTP POST /v2/models/add/infer -> 400" in text and "ferry serve: stopped" in text,
          "--log-verbose 1 from the start, into the file: " + text[-1500:])
    check(off.stderr.read() == "", "nothing on stderr with --log-file")
finally:
    if off.poll() is None:
        off.kill()
        off.wait()
    view.close()
    shm_file.close()
    os.unlink(SHM_PATH)

if failures:
    print("\n%d failure(s); server log:\n%s" % (len(failures), srv.log()[-4000:]))
    sys.exit(1)
print("serve_extensions: all checks passed")

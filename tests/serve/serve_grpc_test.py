#!/usr/bin/python3
"""`ferry serve` over gRPC (inference.GRPCInferenceService, the KServe v2 / Triton protocol), through
Python stubs generated here by protoc + grpc_python_plugin from src/serve/grpc_service.proto: every
RPC, typed contents and raw_input_contents, ModelStreamInfer, the dynamic batcher (each request gets
its own rows back), the status codes (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, RESOURCE_EXHAUSTED)
with their messages, overload, timeout, cancellation, explicit load/unload and the SIGTERM drain.
One server, 127.0.0.1, ports the system picks (--grpc-port 0), read back from its log.

usage: serve_grpc_test.py FERRY SRC_DIR WORKDIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np

from serve_util import (ADD_CONFIG, ServeProcess, add_model, canceled_and_pending, check, echo_model, failures, pack_bytes, put, relu_model,
                        unpack_bytes, wait_for)

FERRY, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# ---- stubs, generated now from the repository's .proto files ---------------------------------
STUBS = os.path.join(WORK, "stubs")
os.makedirs(STUBS)
r = subprocess.run(["protoc", "-I", SRC, "--python_out=" + STUBS, "--grpc_python_out=" + STUBS,
                    "--plugin=protoc-gen-grpc_python=" + shutil.which("grpc_python_plugin"),
                    os.path.join(SRC, "serve", "grpc_service.proto"), os.path.join(SRC, "serve", "model_config.proto")],
                   capture_output=True, text=True, timeout=60)
if r.returncode != 0:
    print("protoc failed:", r.stderr)
    sys.exit(1)
sys.path.insert(0, STUBS)
import grpc  # noqa: E402
from serve import grpc_service_pb2 as pb  # noqa: E402
from serve import grpc_service_pb2_grpc as pb_grpc  # noqa: E402


# ---- the wire contract: Triton's names and field numbers (grpc_service.proto, model_config.proto),
# so stubs generated from Triton's own files interoperate. A renumbered field fails here.
TRITON_FIELDS = {
    "ModelInferRequest": dict(model_name=1, model_version=2, id=3, parameters=4, inputs=5, outputs=6, raw_input_contents=7),
    "ModelInferRequest.InferInputTensor": dict(name=1, datatype=2, shape=3, parameters=4, contents=5),
    "ModelInferRequest.InferRequestedOutputTensor": dict(name=1, parameters=2),
    "ModelInferResponse": dict(model_name=1, model_version=2, id=3, parameters=4, outputs=5, raw_output_contents=6),
    "ModelInferResponse.InferOutputTensor": dict(name=1, datatype=2, shape=3, parameters=4, contents=5),
    "ModelStreamInferResponse": dict(error_message=1, infer_response=2),
    "InferParameter": dict(bool_param=1, int64_param=2, string_param=3, double_param=4, uint64_param=5),
    "InferTensorContents": dict(bool_contents=1, int_contents=2, int64_contents=3, uint_contents=4, uint64_contents=5,
                                fp32_contents=6, fp64_contents=7, bytes_contents=8),
    "ModelMetadataResponse": dict(name=1, versions=2, platform=3, inputs=4, outputs=5),
    "ModelMetadataResponse.TensorMetadata": dict(name=1, datatype=2, shape=3),
    "ServerMetadataResponse": dict(name=1, version=2, extensions=3),
    "ModelConfigResponse": dict(config=1),
    "ModelStatistics": dict(name=1, version=2, last_inference=3, inference_count=4, execution_count=5, inference_stats=6,
                            batch_stats=7),
    "InferStatistics": dict(success=1, fail=2, queue=3, compute_input=4, compute_infer=5, compute_output=6, cache_hit=7, cache_miss=8),
    "InferBatchStatistics": dict(batch_size=1, compute_input=2, compute_infer=3, compute_output=4),
    "StatisticDuration": dict(count=1, ns=2),
    "RepositoryIndexRequest": dict(repository_name=1, ready=2),
    "RepositoryIndexResponse.ModelIndex": dict(name=1, version=2, state=3, reason=4),
    "RepositoryModelLoadRequest": dict(repository_name=1, model_name=2, parameters=3),
    "RepositoryModelUnloadRequest": dict(repository_name=1, model_name=2, parameters=3),
    "ModelConfig": dict(name=1, platform=2, version_policy=3, max_batch_size=4, input=5, output=6, instance_group=7,
                        default_model_filename=8, dynamic_batching=11, parameters=14, backend=17),
    "ModelInput": dict(name=1, data_type=2, format=3, dims=4, reshape=5),
    "ModelOutput": dict(name=1, data_type=2, dims=3, reshape=5, label_filename=4),
    "ModelTensorReshape": dict(shape=1),
    "ModelDynamicBatching": dict(preferred_batch_size=1, max_queue_delay_microseconds=2, default_queue_policy=6),
    "SystemSharedMemoryStatusRequest": dict(name=1),
    "SystemSharedMemoryStatusResponse": dict(regions=1),
    "SystemSharedMemoryStatusResponse.RegionStatus": dict(name=1, key=2, offset=3, byte_size=4),
    "SystemSharedMemoryRegisterRequest": dict(name=1, key=2, offset=3, byte_size=4),
    "SystemSharedMemoryUnregisterRequest": dict(name=1),
    "CudaSharedMemoryStatusRequest": dict(name=1),
    "CudaSharedMemoryStatusResponse": dict(regions=1),
    "CudaSharedMemoryStatusResponse.RegionStatus": dict(name=1, device_id=2, byte_size=3),
    "CudaSharedMemoryRegisterRequest": dict(name=1, raw_handle=2, device_id=3, byte_size=4),
    "CudaSharedMemoryUnregisterRequest": dict(name=1),
    "TraceSettingRequest": dict(settings=1, model_name=2),
    "TraceSettingRequest.SettingValue": dict(value=1),
    "TraceSettingResponse": dict(settings=1),
    "LogSettingsRequest": dict(settings=1),
    "LogSettingsRequest.SettingValue": dict(bool_param=1, uint32_param=2, string_param=3),
    "LogSettingsResponse": dict(settings=1),
}
for path, fields in TRITON_FIELDS.items():
    desc = pb.DESCRIPTOR.pool.FindMessageTypeByName("inference." + path)
    for name, number in fields.items():
        f = desc.fields_by_name.get(name)
        check(f is not None and f.number == number, "inference.%s.%s is field %d (Triton's), got %s" % (path, name, number, f and f.number))
service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
check(service.full_name == "inference.GRPCInferenceService", "service name " + service.full_name)
check(sorted(m.name for m in service.methods) == sorted(["ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
                                                        "ModelInfer", "ModelStreamInfer", "ModelConfig", "ModelStatistics",
                                                        "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
                                                        "SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
                                                        "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
                                                        "TraceSetting", "LogSettings"]),
      "the service's methods: %s" % [m.name for m in service.methods])


# ---- the repository -------------------------------------------------------------------------
REPO = os.path.join(WORK, "repo")
put(REPO, "add", add_model(), ADD_CONFIG % ("add", ""))
put(REPO, "batched", add_model(), ADD_CONFIG % ("batched", "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }"))
put(REPO, "queued", add_model(), ADD_CONFIG % ("queued", """dynamic_batching {
  preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2500000
  default_queue_policy { max_queue_size: 2 allow_timeout_override: true }
}"""))
# One request's room, held 10 s (a full preferred batch of 8 runs at once): a cancel frees it at once.
put(REPO, "cancel", add_model(), ADD_CONFIG % ("cancel", """dynamic_batching {
  preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 10000000
  default_queue_policy { max_queue_size: 1 }
}"""))
put(REPO, "relu", relu_model())
put(REPO, "echo", echo_model())  # no config.pbtxt: derived (TYPE_STRING, a batch axis)
put(REPO, "broken", relu_model(), 'name: "broken"\nmax_batch_size: 0\ninput [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 3 ] ]\n')

# ---- the server -----------------------------------------------------------------------------
srv = ServeProcess(FERRY, REPO, "--model-control-mode", "explicit", "--load-model", "*", "--exit-on-error=false",
                   "--http-max-input-size", "1000000", "--grpc-max-message-size", "2000000")
proc, lines, ports = srv.proc, srv.lines, srv.ports
if "grpc" not in ports:
    print("the server did not report its gRPC port:\n" + "".join(lines))
    proc.kill()
    sys.exit(1)
channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
stub = pb_grpc.GRPCInferenceServiceStub(channel)
T = 30  # seconds, every call


def infer_request(model, x, y, raw=True, **kw):
    req = pb.ModelInferRequest(model_name=model, **kw)
    for name, a in (("x", x), ("y", y)):
        t = req.inputs.add(name=name, datatype="FP32", shape=list(a.shape))
        if raw:
            req.raw_input_contents.append(a.astype(np.float32).tobytes())
        else:
            t.contents.fp32_contents.extend(a.flatten().tolist())
    return req


def output(resp, name="z"):
    for i, o in enumerate(resp.outputs):
        if o.name == name:
            check(o.datatype == "FP32", "output datatype FP32, got " + o.datatype)
            return np.frombuffer(resp.raw_output_contents[i], dtype=np.float32).reshape(list(o.shape))
    return None


def expect_error(call, code, needle, what):
    try:
        call()
        check(False, what + ": expected %s, the call succeeded" % code)
    except grpc.RpcError as e:
        check(e.code() == code and needle in e.details(), "%s: expected %s with '%s', got %s '%s'" % (what, code, needle, e.code(), e.details()))


def metrics():
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % ports["metrics"], timeout=T) as f:
        return f.read().decode()


x = np.arange(8, dtype=np.float32).reshape(2, 4)
y = np.full((2, 4), 0.5, dtype=np.float32)
try:
    # ---- health, metadata, config ----------------------------------------------------------
    check(stub.ServerLive(pb.ServerLiveRequest(), timeout=T).live, "ServerLive")
    # Strict readiness (Triton's default): 'broken' failed to load, so the server is not ready
    # until it is unloaded (below, before the SIGTERM).
    check(not stub.ServerReady(pb.ServerReadyRequest(), timeout=T).ready, "ServerReady is false while 'broken' is UNAVAILABLE")
    check(stub.ModelReady(pb.ModelReadyRequest(name="add"), timeout=T).ready, "ModelReady add")
    check(not stub.ModelReady(pb.ModelReadyRequest(name="nosuch"), timeout=T).ready, "ModelReady of an unknown model is false")
    md = stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=T)
    check(md.name == "ferry" and "model_repository" in md.extensions and "statistics" in md.extensions, "ServerMetadata: %s" % md)
    mm = stub.ModelMetadata(pb.ModelMetadataRequest(name="add"), timeout=T)
    check(mm.name == "add" and list(mm.versions) == ["1"] and mm.platform == "onnxruntime_onnx", "ModelMetadata: %s" % mm)
    check([(t.name, t.datatype, list(t.shape)) for t in mm.inputs] == [("x", "FP32", [-1, 4]), ("y", "FP32", [-1, 4])],
          "ModelMetadata inputs: %s" % mm.inputs)
    check([(t.name, list(t.shape)) for t in mm.outputs] == [("z", [-1, 4])], "ModelMetadata outputs: %s" % mm.outputs)
    rm = stub.ModelMetadata(pb.ModelMetadataRequest(name="relu", version="1"), timeout=T)
    check([list(t.shape) for t in rm.inputs] == [[2, 3]], "relu (no config.pbtxt, max_batch_size 0) keeps its shape: %s" % rm.inputs)
    # Triton fills in the backend fields of an ONNX model's config (AutoCompleteBackendFields).
    rc = stub.ModelConfig(pb.ModelConfigRequest(name="relu"), timeout=T).config
    check(rc.backend == "onnxruntime" and rc.platform == "onnxruntime_onnx" and rc.default_model_filename == "model.onnx"
          and rm.platform == "onnxruntime_onnx", "relu (no config.pbtxt): backend onnxruntime, platform onnxruntime_onnx: %s" % rc)
    cfg = stub.ModelConfig(pb.ModelConfigRequest(name="batched"), timeout=T).config
    check(cfg.name == "batched" and cfg.max_batch_size == 8 and [i.name for i in cfg.input] == ["x", "y"]
          and list(cfg.input[0].dims) == [4] and cfg.input[0].data_type == 11 and list(cfg.dynamic_batching.preferred_batch_size) == [4]
          and cfg.dynamic_batching.max_queue_delay_microseconds == 5000000, "ModelConfig batched: %s" % cfg)
    expect_error(lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="nosuch"), timeout=T), grpc.StatusCode.NOT_FOUND, "nosuch",
                 "ModelMetadata unknown model")
    expect_error(lambda: stub.ModelConfig(pb.ModelConfigRequest(name="add", version="7"), timeout=T), grpc.StatusCode.NOT_FOUND, "7",
                 "ModelConfig unknown version")

    # ---- ModelInfer: raw and typed contents ----------------------------------------------
    resp = stub.ModelInfer(infer_request("add", x, y, id="r1"), timeout=T)
    check(resp.model_name == "add" and resp.model_version == "1" and resp.id == "r1", "ModelInfer echo: %s %s %s" % (resp.model_name, resp.model_version, resp.id))
    z = output(resp)
    check(z is not None and np.array_equal(z, x + y), "ModelInfer raw: %s" % z)
    resp = stub.ModelInfer(infer_request("add", x, y, raw=False), timeout=T)
    check(np.array_equal(output(resp), x + y), "ModelInfer typed fp32_contents")
    a = np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)
    req = pb.ModelInferRequest(model_name="relu", model_version="1")
    req.inputs.add(name="a", datatype="FP32", shape=[2, 3]).contents.fp32_contents.extend(a.flatten().tolist())
    req.outputs.add(name="b")
    resp = stub.ModelInfer(req, timeout=T)
    check(np.array_equal(output(resp, "b"), np.maximum(a, 0)), "ModelInfer relu with a requested output")

    # Triton's classification extension: each row's top classes as "value:index" BYTES.
    xc = np.array([[1, 5, 3, 2], [0, -1, 7, 7]], dtype=np.float32)
    req = infer_request("add", xc, np.zeros_like(xc))
    req.outputs.add(name="z").parameters["classification"].int64_param = 2
    resp = stub.ModelInfer(req, timeout=T)
    o = resp.outputs[0]
    check(o.datatype == "BYTES" and list(o.shape) == [2, 2] and
          unpack_bytes(resp.raw_output_contents[0]) == [b"5.000000:1", b"3.000000:2", b"7.000000:2", b"7.000000:3"],
          "ModelInfer classification: %s %s %s" % (o.datatype, list(o.shape), resp.raw_output_contents[:1]))
    req.outputs[0].parameters["classification"].int64_param = 0
    expect_error(lambda: stub.ModelInfer(req, timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "'classification' is 0",
                 "ModelInfer classification 0")

    # ---- bad requests: the code, and a message naming the input, expected vs given ---------
    bad = infer_request("add", x, y)
    bad.inputs[1].datatype = "INT64"
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "input 'y': datatype INT64 but model 'add' expects FP32", "wrong datatype")
    expect_error(lambda: stub.ModelInfer(infer_request("add", x, np.zeros((2, 5), np.float32)), timeout=T),
                 grpc.StatusCode.INVALID_ARGUMENT, "unexpected shape for input 'y'", "wrong shape")
    bad = infer_request("add", x, y)
    del bad.inputs[1]
    del bad.raw_input_contents[1]
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "input 'y' is missing", "missing input")
    bad = infer_request("add", x, y)
    bad.inputs[0].name = "w"
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "unexpected inference input 'w' for model 'add'; its inputs are: x, y", "unknown input")
    bad = infer_request("add", x, y)
    bad.raw_input_contents[0] = bad.raw_input_contents[0][:-4]
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "input 'x': raw_input_contents[0] has 28 bytes but shape [2,4] of FP32 needs 32", "raw size mismatch")
    bad = infer_request("add", x, y)
    del bad.raw_input_contents[1]
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "1 raw_input_contents for 2 inputs",
                 "raw count mismatch")
    bad = infer_request("add", x, y, raw=False)
    del bad.inputs[0].contents.fp32_contents[-1]
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "input 'x': 7 values given in contents.fp32_contents but shape [2,4] needs 8", "typed count mismatch")
    bad = infer_request("add", x, y, raw=False)
    bad.inputs[0].contents.int_contents.extend([1] * 8)
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "contents.int_contents is set but FP32 values go in contents.fp32_contents", "typed contents in the wrong field")
    bad = infer_request("add", x, y)
    bad.outputs.add(name="q")
    expect_error(lambda: stub.ModelInfer(bad, timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference output 'q'",
                 "unknown output")
    expect_error(lambda: stub.ModelInfer(infer_request("add", np.zeros((9, 4), np.float32), np.zeros((9, 4), np.float32)), timeout=T),
                 grpc.StatusCode.INVALID_ARGUMENT, "batch size 9 is outside 1..8", "batch over max_batch_size")
    expect_error(lambda: stub.ModelInfer(infer_request("nosuch", x, y), timeout=T), grpc.StatusCode.NOT_FOUND, "nosuch", "unknown model")
    expect_error(lambda: stub.ModelInfer(infer_request("add", x, y, model_version="3"), timeout=T), grpc.StatusCode.NOT_FOUND, "3",
                 "unknown version")
    expect_error(lambda: stub.ModelInfer(infer_request("broken", x, y), timeout=T), grpc.StatusCode.UNAVAILABLE, "not ready",
                 "a model that failed to load")
    # --grpc-max-message-size 2000000: a larger message is RESOURCE_EXHAUSTED naming the limit;
    # --http-max-input-size (1000000 here) is HTTP's alone, as Triton's: 1.1 MB reaches the decoder.
    big = infer_request("add", x, y)
    big.raw_input_contents[0] = b"\0" * 1100000
    expect_error(lambda: stub.ModelInfer(big, timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents[0] has 1100000 bytes",
                 "a message over --http-max-input-size but under --grpc-max-message-size is decoded")
    huge = infer_request("add", x, y)
    huge.raw_input_contents[0] = b"\0" * 2100000
    expect_error(lambda: stub.ModelInfer(huge, timeout=T), grpc.StatusCode.RESOURCE_EXHAUSTED, "vs. 2000000)",
                 "a message over --grpc-max-message-size names the limit")
    resp = stub.ModelInfer(infer_request("add", x, y), timeout=T)
    check(np.array_equal(output(resp), x + y), "the server keeps serving after bad requests")

    # ---- BYTES: contents.bytes_contents and raw_input_contents (4-byte length + bytes), raw out ----
    vals = [b"", b"\x00\xffbin", "\u00e9t\u00e9".encode(), b"q" * 100]
    req = pb.ModelInferRequest(model_name="echo")
    req.inputs.add(name="s", datatype="BYTES", shape=[2, 2]).contents.bytes_contents.extend(vals)
    resp = stub.ModelInfer(req, timeout=T)
    check(resp.outputs[0].datatype == "BYTES" and list(resp.outputs[0].shape) == [2, 2] and resp.raw_output_contents[0] == pack_bytes(vals),
          "BYTES through bytes_contents, back as length-prefixed raw_output_contents: %s" % resp)
    req = pb.ModelInferRequest(model_name="echo")
    req.inputs.add(name="s", datatype="BYTES", shape=[1, 2])
    req.raw_input_contents.append(pack_bytes(vals[:2]))
    resp = stub.ModelInfer(req, timeout=T)
    check(resp.raw_output_contents[0] == pack_bytes(vals[:2]), "BYTES through raw_input_contents")
    req.raw_input_contents[0] = pack_bytes(vals[:2])[:-1]
    expect_error(lambda: stub.ModelInfer(req, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "input 's' (raw_input_contents[0]): BYTES element 1 says 5 bytes but only 4 are left", "BYTES raw cut short")
    req = pb.ModelInferRequest(model_name="echo")
    req.inputs.add(name="s", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend(vals[:3])
    expect_error(lambda: stub.ModelInfer(req, timeout=T), grpc.StatusCode.INVALID_ARGUMENT,
                 "3 values given in contents.bytes_contents but shape [1,2] needs 2", "BYTES count")

    # ---- Triton's shared-memory methods (serve_extensions_test.py has the rest): off by default ----
    check(len(stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=T).regions) == 0, "no system shm region")
    check(len(stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(), timeout=T).regions) == 0, "no CUDA shm region")
    stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(), timeout=T)  # all of none: OK
    stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest(name="r1"), timeout=T)  # idempotent, as Triton's
    expect_error(lambda: stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="r0"), timeout=T), grpc.StatusCode.NOT_FOUND,
                 "no system shared-memory region 'r0' is registered", "shm status of a named region")
    expect_error(lambda: stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="r", key="/k", byte_size=64), timeout=T),
                 grpc.StatusCode.INVALID_ARGUMENT, "client shared memory is disabled: start the server with `--allow-client-shm true`",
                 "shm register without --allow-client-shm")
    expect_error(lambda: stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="r", byte_size=64), timeout=T),
                 grpc.StatusCode.UNIMPLEMENTED, "CudaSharedMemoryRegister: CUDA shared memory is not supported by this build", "CUDA shm register")
    ts = stub.TraceSetting(pb.TraceSettingRequest(), timeout=T).settings  # (serve_extensions_test.py traces)
    check(list(ts["trace_level"].value) == ["OFF"] and list(ts["trace_rate"].value) == ["1000"], "TraceSetting reads the settings: %s" % ts)
    expect_error(lambda: stub.TraceSetting(pb.TraceSettingRequest(settings={"trace_level": pb.TraceSettingRequest.SettingValue(value=["TIMESTAMPS"])}),
                                           timeout=T), grpc.StatusCode.INVALID_ARGUMENT, "no trace file; start `ferry serve --trace-file PATH`",
                 "tracing without a trace file")
    ls = stub.LogSettings(pb.LogSettingsRequest(), timeout=T).settings  # (serve_extensions_test.py changes them)
    check(ls["log_verbose_level"].uint32_param == 0 and ls["log_info"].bool_param and ls["log_format"].string_param == "default",
          "LogSettings reads the settings: %s" % ls)

    # ---- the dynamic batcher: 4 concurrent requests, one execution, each its own rows ------
    before = stub.ModelStatistics(pb.ModelStatisticsRequest(name="batched"), timeout=T).model_stats[0]
    reqs = [(np.full((1, 4), i, np.float32), np.full((1, 4), 10 * i, np.float32)) for i in range(4)]
    futures = [stub.ModelInfer.future(infer_request("batched", a, b, id=str(i)), timeout=T) for i, (a, b) in enumerate(reqs)]
    for i, f in enumerate(futures):
        resp = f.result()
        check(resp.id == str(i) and np.array_equal(output(resp), reqs[i][0] + reqs[i][1]), "batched request %d got its own rows" % i)
    after = stub.ModelStatistics(pb.ModelStatisticsRequest(name="batched", version="1"), timeout=T).model_stats[0]
    check(after.inference_count - before.inference_count == 4 and after.execution_count - before.execution_count == 1,
          "4 requests ran as one batch: %d items, %d executions" % (after.inference_count - before.inference_count,
                                                                    after.execution_count - before.execution_count))
    check(any(b.batch_size == 4 and b.compute_infer.count == 1 for b in after.batch_stats), "batch_stats shows a batch of 4: %s" % after.batch_stats)

    # ---- statistics ----------------------------------------------------------------------
    st = stub.ModelStatistics(pb.ModelStatisticsRequest(name="add"), timeout=T).model_stats
    check(len(st) == 1 and st[0].name == "add" and st[0].version == "1" and st[0].inference_stats.success.count == 4
          and st[0].inference_count == 8 and st[0].last_inference > 0, "ModelStatistics add: %s" % st)  # with the classification's
    allst = stub.ModelStatistics(pb.ModelStatisticsRequest(), timeout=T).model_stats
    check(sorted(s.name for s in allst) == ["add", "batched", "cancel", "echo", "queued", "relu"], "ModelStatistics of every model: %s" % [s.name for s in allst])
    expect_error(lambda: stub.ModelStatistics(pb.ModelStatisticsRequest(name="nosuch"), timeout=T), grpc.StatusCode.NOT_FOUND, "nosuch",
                 "ModelStatistics unknown model")

    # ---- ModelStreamInfer: responses matched by id, an error in error_message --------------
    def stream_requests():
        for i in range(3):
            yield infer_request("add", np.full((1, 4), i, np.float32), np.ones((1, 4), np.float32), id="s%d" % i)
        b = infer_request("add", x, y, id="sbad")
        b.inputs[0].datatype = "FP64"
        yield b
        yield infer_request("add", x, y, raw=False, id="s3")
    got = {}
    for resp in stub.ModelStreamInfer(stream_requests(), timeout=T):
        got[resp.infer_response.id] = resp
    check(sorted(got) == ["s0", "s1", "s2", "s3", "sbad"], "stream: one response per request: %s" % sorted(got))
    for i in range(3):
        r = got.get("s%d" % i)
        check(r is not None and r.error_message == "" and np.array_equal(output(r.infer_response), np.full((1, 4), i + 1, np.float32)),
              "stream response s%d" % i)
    check("s3" in got and np.array_equal(output(got["s3"].infer_response), x + y), "stream response s3 (typed contents)")
    check("sbad" in got and "input 'x': datatype FP64 but model 'add' expects FP32" in got["sbad"].error_message,
          "stream error_message: %s" % (got["sbad"].error_message if "sbad" in got else None))

    # ---- overload, timeout, cancellation on the queued model (max_queue_size 2) ----------
    q = [stub.ModelInfer.future(infer_request("queued", x[:1], y[:1], id="q%d" % i), timeout=T) for i in range(2)]
    time.sleep(0.3)
    expect_error(lambda: stub.ModelInfer(infer_request("queued", x[:1], y[:1]), timeout=T), grpc.StatusCode.UNAVAILABLE,
                 "the queue is full (max_queue_size 2", "overload")
    for f in q:
        check(np.array_equal(output(f.result()), x[:1] + y[:1]), "queued requests finish after an overload rejection")
    t0 = time.time()
    timeout_param = pb.InferParameter(int64_param=100000)
    req = infer_request("queued", x[:1], y[:1])
    req.parameters["timeout"].CopyFrom(timeout_param)
    expect_error(lambda: stub.ModelInfer(req, timeout=T), grpc.StatusCode.UNAVAILABLE, "timed out", "per-request timeout")
    check(time.time() - t0 < 2.0, "the timeout rejects before the queue delay (%.2f s)" % (time.time() - t0))
    f = stub.ModelInfer.future(infer_request("queued", x[:1], y[:1]), timeout=T)
    time.sleep(0.3)
    f.cancel()
    canceled = None
    for _ in range(100):
        canceled = re.search(r'ferry_inference_request_failure\{model="queued",version="1",reason="CANCELED"\} (\d+)', metrics())
        if canceled and canceled.group(1) == "1":
            break
        time.sleep(0.1)
    check(canceled and canceled.group(1) == "1", "a cancelled call's queued request is dropped (CANCELED)")

    # The cancelled call's request leaves the queue at once, not at the batcher's next wake (10 s
    # away on "cancel"): its max_queue_size 1 slot takes the next request, CANCELED and pending at once.
    def cancel_counts():  # (CANCELED, pending) of "cancel"
        return canceled_and_pending(metrics(), "cancel")

    def wait_counts(want, limit):
        return wait_for(cancel_counts, want, limit)

    f = stub.ModelInfer.future(infer_request("cancel", x[:1], y[:1]), timeout=T)
    check(wait_counts((0, 1), 5) == (0, 1), "cancel: the request is queued: %s" % (cancel_counts(),))
    t0 = time.time()
    f.cancel()
    got = wait_counts((1, 0), 3)
    took = time.time() - t0
    check(got == (1, 0) and took < 3, "cancel: CANCELED 1, pending 0 %.2f s after the cancel (the delay is 10 s): %s" % (took, got))
    x8, y8 = np.tile(x[:1], (8, 1)), np.tile(y[:1], (8, 1))
    try:
        z = output(stub.ModelInfer(infer_request("cancel", x8, y8), timeout=T))
        check(np.array_equal(z, x8 + y8), "cancel: the next request's output")
    except grpc.RpcError as e:
        check(False, "cancel: the freed slot takes the next request: %s %s" % (e.code(), e.details()))
    check(time.time() - t0 < 5 and cancel_counts() == (1, 0), "cancel: answered %.2f s after the cancel, pending 0: %s"
          % (time.time() - t0, cancel_counts()))

    # ---- repository: index, unload, load ------------------------------------------------
    idx = {m.name: m for m in stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=T).models}
    check(idx.get("add") and idx["add"].state == "READY", "index: add READY")
    check(idx.get("broken") and idx["broken"].state == "UNAVAILABLE" and "config.pbtxt" in idx["broken"].reason,
          "index: broken UNAVAILABLE with its reason: %s" % idx.get("broken"))
    ready = [m.name for m in stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), timeout=T).models]
    check("broken" not in ready and "add" in ready, "index ready=true: %s" % ready)
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="relu"), timeout=T)
    check(not stub.ModelReady(pb.ModelReadyRequest(name="relu"), timeout=T).ready, "relu not ready after unload")
    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="relu"), timeout=T)
    check(stub.ModelReady(pb.ModelReadyRequest(name="relu"), timeout=T).ready, "relu ready after load")
    expect_error(lambda: stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="broken"), timeout=T),
                 grpc.StatusCode.INVALID_ARGUMENT, "config.pbtxt", "loading a broken model")
    expect_error(lambda: stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="nosuch"), timeout=T),
                 grpc.StatusCode.NOT_FOUND, "nosuch", "loading an unknown model")

    # ---- ferry perf --protocol grpc: the HTTP mode's report, the server-side split --------
    pj = os.path.join(WORK, "perf.json")
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % ports["grpc"], "--protocol", "grpc", "-m", "add", "--concurrency-range", "1:2",
                        "-p", "100", "--max-trials", "3", "-b", "2", "--json", pj], capture_output=True, text=True, timeout=60)
    if check(r.returncode == 0 and "gRPC" in r.stdout, "ferry perf --protocol grpc: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check([row["concurrency"] for row in rows] == [1, 2] and all(row["throughput"] > 0 and row["errors"] == 0 and row["avg_batch"] == 2.0
                                                                    for row in rows), "perf grpc rows: %s" % rows)
    # --streaming: each stream's requests on one ModelStreamInfer call (perf_analyzer's flag), gRPC only
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % ports["grpc"], "--protocol", "grpc", "--streaming", "-m", "add", "--concurrency-range",
                        "1:2", "-p", "100", "--max-trials", "3", "-b", "2", "--json", pj], capture_output=True, text=True, timeout=60)
    if check(r.returncode == 0 and "gRPC stream" in r.stdout, "ferry perf --streaming: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check([row["concurrency"] for row in rows] == [1, 2] and all(row["throughput"] > 0 and row["errors"] == 0 and row["avg_batch"] == 2.0
                                                                    for row in rows), "perf grpc --streaming rows: %s" % rows)
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % ports["http"], "--streaming", "-m", "add"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--streaming is for --protocol grpc" in r.stderr, "perf --streaming over HTTP: %s" % r.stderr[-300:])
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % ports["grpc"], "--protocol", "grpc", "-m", "nosuch"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 2 and "NOT_FOUND" in r.stderr and "nosuch" in r.stderr, "perf grpc on an unknown model: %s" % r.stderr[-300:])
    r = subprocess.run([FERRY, "perf", "127.0.0.1:%d" % ports["grpc"], "--protocol", "grpc", "-m", "echo", "-p", "100", "--max-trials", "3",
                        "-b", "2", "--string-length", "7", "--json", pj], capture_output=True, text=True, timeout=60)
    if check(r.returncode == 0, "ferry perf --protocol grpc, BYTES: %d %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:])):
        rows = json.load(open(pj))
        check(rows[0]["throughput"] > 0 and rows[0]["errors"] == 0, "perf grpc BYTES rows: %s" % rows)

    # ---- a second server on the same gRPC port fails to start, naming it (no SO_REUSEPORT) --
    r = subprocess.run([FERRY, "serve", "--model-repository", REPO, "--http-address", "127.0.0.1", "--http-port", "0", "--metrics-port",
                        "0", "--grpc-port", str(ports["grpc"]), "--model-control-mode", "explicit"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "cannot listen for gRPC on 127.0.0.1:%d" % ports["grpc"] in r.stderr,
          "a busy gRPC port: %d %s" % (r.returncode, r.stderr[-400:]))

    # ---- SIGTERM: not ready at once, new work refused, the queued request finishes ------
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="broken"), timeout=T)
    check(stub.ServerReady(pb.ServerReadyRequest(), timeout=T).ready, "ServerReady once the failed model is unloaded")
    pending = stub.ModelInfer.future(infer_request("queued", x[:1], y[:1], id="last"), timeout=T)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while time.time() < deadline and stub.ServerReady(pb.ServerReadyRequest(), timeout=T).ready:
        time.sleep(0.02)
    check(not stub.ServerReady(pb.ServerReadyRequest(), timeout=T).ready, "not ready after SIGTERM")
    expect_error(lambda: stub.ModelInfer(infer_request("add", x, y), timeout=T), grpc.StatusCode.UNAVAILABLE, "shutting down",
                 "new work after SIGTERM")
    check(np.array_equal(output(pending.result()), x[:1] + y[:1]), "the queued request finished during the drain")
    rc = proc.wait(30)
    check(rc == 0, "exit 0 after the drain, got %s" % rc)
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()

if failures:
    print("\n%d failure(s); server log:\n%s" % (len(failures), "".join(lines)[-4000:]))
    sys.exit(1)
print("serve_grpc: all checks passed")

#!/usr/bin/python3
"""Models at ai.onnx opsets 1-6 (upgraded at import, docs/onnx_import.md): each is built with
onnx.helper here, run with `ferry run`, and checked against a NumPy reference; `ferry info` says
the model was upgraded and from which opset; a node the converter cannot take is named.

usage: check_old_opsets.py FERRY WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FERRY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(7)
failures = []


def model(nodes, inputs, outputs, opset, inits=(), list_inits=False):
    # Exporters of that time listed every initializer among the graph inputs (IR version 3).
    inputs = list(inputs) + ([(n, list(a.shape)) for n, a in inits] if list_inits else [])
    g = helper.make_graph(nodes, "old", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="old-exporter")
    m.ir_version = 3
    return m


def conv2d(x, w, b, pad):
    n, c, h, wd = x.shape
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, wd + 2 * pad - k + 1
    y = np.zeros((n, w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + k, j:j + k], w)
    return y + b.reshape(1, -1, 1, 1)


def pool2(x, fn):
    n, c, h, w = x.shape
    return fn(x.reshape(n, c, h // 2, 2, w // 2, 2), axis=(3, 5))


def run_case(name, m, feeds, expected, opset, rtol=1e-4, atol=1e-5):
    path = os.path.join(WORK, name + ".onnx")
    onnx.save(m, path)
    args = [FERRY, "run", path, "--output-dir", os.path.join(WORK, name + "_out")]
    for k, v in feeds.items():
        f = os.path.join(WORK, f"{name}_{k}.npy")
        np.save(f, v.astype(np.float32))
        args += ["--input", f"{k}={f}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"{name}: ferry run exit {r.returncode}: {r.stderr.strip()[-400:]}")
        return
    for out, ref in expected.items():
        got = np.load(os.path.join(WORK, name + "_out", out + ".npy"))
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=rtol, atol=atol):
            err = np.abs(got - ref).max() if got.shape == ref.shape else f"shape {got.shape} vs {ref.shape}"
            failures.append(f"{name}: output {out} differs from NumPy (max abs err {err})")
    info = subprocess.run([FERRY, "info", path, "--json"], capture_output=True, text=True)
    j = json.loads(info.stdout) if info.returncode == 0 else {}
    if j.get("upgraded_from_opset") != opset:
        failures.append(f"{name}: ferry info --json upgraded_from_opset = {j.get('upgraded_from_opset')}, expected {opset}")
    text = subprocess.run([FERRY, "info", path], capture_output=True, text=True).stdout
    if f"upgraded at import from ai.onnx opset {opset}" not in text:
        failures.append(f"{name}: ferry info does not say the model was upgraded from opset {opset}:\n{text}")
    print(f"ok   {name} (opset {opset})")


# A first-generation CNN at opset 1: consumed_inputs, is_test, spatial, Reshape's shape
# attribute, Gemm's broadcast, Concat without axis (default 1 before opset 4).
x = rng.standard_normal((2, 3, 8, 8))
w = rng.standard_normal((4, 3, 3, 3)) * 0.3
b = rng.standard_normal(4)
scale, bias = rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
mean, var = rng.standard_normal(4) * 0.1, rng.uniform(0.5, 2.0, 4)
fw, fb = rng.standard_normal((5, 8 * 4 * 4)) * 0.1, rng.standard_normal(5)
nodes = [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], is_test=1, spatial=1,
                     epsilon=1e-5, consumed_inputs=[0, 0, 0, 1, 1]),
    helper.make_node("Relu", ["bn"], ["r"], consumed_inputs=[0]),
    helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("AveragePool", ["r"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Concat", ["mp", "ap"], ["cat"]),
    helper.make_node("Dropout", ["cat"], ["d"], is_test=1, ratio=0.5),
    helper.make_node("Reshape", ["d"], ["flat"], shape=[2, -1]),
    helper.make_node("Gemm", ["flat", "fw", "fb"], ["fc"], transB=1, broadcast=1),
    helper.make_node("Softmax", ["fc"], ["y"]),
]
m = model(nodes, [("x", [2, 3, 8, 8])], ["y"], 1,
          [("w", w), ("b", b), ("scale", scale), ("bias", bias), ("mean", mean), ("var", var), ("fw", fw), ("fb", fb)],
          list_inits=True)
bn = (conv2d(x, w, b, 1) - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-5)
bn = bn * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)
r = np.maximum(bn, 0)
cat = np.concatenate([pool2(r, np.max), pool2(r, np.mean)], axis=1)
fc = cat.reshape(2, -1) @ fw.T + fb
e = np.exp(fc - fc.max(axis=1, keepdims=True))
run_case("cnn_opset1", m, {"x": x}, {"y": e / e.sum(axis=1, keepdims=True)}, 1)

# Opset 6 broadcasting: B aligned at an axis of A (a per-channel bias), the old
# broadcast flag without axis, PRelu's per-channel slope, variadic Sum/Max/Min of equal
# shapes, Pow with a broadcast exponent.
a = rng.standard_normal((2, 3, 4, 5))
cb, row = rng.standard_normal(3), rng.standard_normal(5)
slope = rng.uniform(0.1, 0.3, (3, 1, 1))
other = rng.standard_normal((2, 3, 4, 5))
nodes = [
    helper.make_node("Add", ["a", "cb"], ["s1"], broadcast=1, axis=1),
    helper.make_node("Mul", ["s1", "row"], ["s2"], broadcast=1),
    helper.make_node("PRelu", ["s2", "slope"], ["p"]),
    helper.make_node("Sum", ["p", "other", "a"], ["sum"]),
    helper.make_node("Max", ["sum", "other"], ["mx"]),
    helper.make_node("Min", ["mx", "a"], ["mn"]),
    helper.make_node("Abs", ["mn"], ["ab"]),
    helper.make_node("Pow", ["ab", "two"], ["y"], broadcast=1),
    helper.make_node("Sub", ["a", "cb"], ["z"], broadcast=1, axis=1),
]
m = model(nodes, [("a", [2, 3, 4, 5]), ("other", [2, 3, 4, 5])], ["y", "z"], 6,
          [("cb", cb), ("row", row), ("slope", slope), ("two", np.array([2.0]))])
s2 = (a + cb.reshape(1, 3, 1, 1)) * row
p = np.where(s2 >= 0, s2, s2 * slope)
mn = np.minimum(np.maximum(p + other + a, other), a)
run_case("broadcast_opset6", m, {"a": a, "other": other},
         {"y": np.abs(mn) ** 2, "z": a - cb.reshape(1, 3, 1, 1)}, 6)

# Opset 3: Upsample (opset-1 attributes) and Concat with its default axis.
u = rng.standard_normal((1, 2, 3, 3))
nodes = [
    helper.make_node("Upsample", ["u"], ["up"], height_scale=2.0, width_scale=2.0, mode="NEAREST"),
    helper.make_node("Concat", ["up", "up"], ["y"]),
]
m = model(nodes, [("u", [1, 2, 3, 3])], ["y"], 3)
up = u.repeat(2, axis=2).repeat(2, axis=3)
run_case("upsample_opset3", m, {"u": u}, {"y": np.concatenate([up, up], axis=1)}, 3)

# A node the converter cannot upgrade: the error names the node and its op, exit code 2.
m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NoSuchOp", ["r"], ["y"], name="mystery_7")],
          [("x", [2, 3])], ["y"], 2)
path = os.path.join(WORK, "unconvertible.onnx")
onnx.save(m, path)
np.save(os.path.join(WORK, "x23.npy"), np.zeros((2, 3), np.float32))
r = subprocess.run([FERRY, "run", path, "--input", "x=" + os.path.join(WORK, "x23.npy")], capture_output=True, text=True)
if r.returncode != 2 or "mystery_7" not in r.stderr or "NoSuchOp" not in r.stderr:
    failures.append(f"unconvertible: expected exit 2 naming node 'mystery_7' (NoSuchOp), got {r.returncode}: {r.stderr}")
else:
    print("ok   unconvertible node named:", r.stderr.strip().splitlines()[-1][:200])

# A broken old graph is named by ferry's own checks (a dangling edge), not the converter's.
m = model([helper.make_node("Relu", ["nope"], ["y"], name="dangling")], [("x", [2, 3])], ["y"], 3)
path = os.path.join(WORK, "dangling.onnx")
onnx.save(m, path)
r = subprocess.run([FERRY, "run", path, "--input", "x=" + os.path.join(WORK, "x23.npy")], capture_output=True, text=True)
if r.returncode != 2 or "dangling edge" not in r.stderr or "'nope'" not in r.stderr:
    failures.append(f"dangling: expected exit 2 naming the dangling edge 'nope', got {r.returncode}: {r.stderr}")
else:
    print("ok   dangling edge in an old model named by ferry's graph check")

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)

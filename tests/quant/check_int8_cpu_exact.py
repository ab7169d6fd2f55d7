#!/usr/bin/python3
"""A small MobileNetV2 quantized by `ferry quantize`, run by the cpu backend and by the reference kernels:
the int8 outputs byte for byte the same (registered in tests/quant/ctest_snippet.cmake).

    check_int8_cpu_exact.py FERRY WORKDIR

The model (float, seeded He weights, 1 x 3 x 32 x 32): a 3x3/2 stem + ReLU6 (Clip), then MobileNetV2's
InvertedResidual blocks: a depthwise 3x3 (16 channels) + ReLU6 and a 1x1 projection; a 1x1 expansion to
40 channels + ReLU6, a depthwise 3x3/2 + ReLU6 and a projection; an expansion to 96, a depthwise 3x3 and a
projection with the residual Add; GlobalAveragePool, Flatten, Gemm. `ferry quantize` writes the QDQ
files (the default, and --no-plain-floor for ferry's own structure with int32 biases); `ferry run -d cpu` (the fused int8 kernels: int8_depthwise_conv.cpp for the depthwise 3x3s on
AVX2 hosts without VNNI, int8_im2col_conv.cpp / int8_gemm.cpp / oneDNN for the rest) at 1 and 2 threads and
`ferry run -d cpu-ref -O 2` (the same fused graph on the reference kernels, src/ops/quantize_fused.cpp)
must give the same bytes on two inputs, and the output must not be constant.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def build(path, rng):
    inits, nodes = [], []

    def w(name, shape, fan_in):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name))
        return name

    def b(name, n):
        inits.append(numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), name))
        return name

    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "c0"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "c6"))

    def conv(x, name, cin, cout, k, stride=1, group=1, relu6=True):
        y = name + "_conv"
        nodes.append(helper.make_node("Conv", [x, w(name + "_w", (cout, cin // group, k, k), cin // group * k * k), b(name + "_b", cout)],
                                      [y], name=name, kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, group=group))
        if not relu6:
            return y
        nodes.append(helper.make_node("Clip", [y, "c0", "c6"], [name + "_r6"], name=name + "_clip"))
        return name + "_r6"

    x = conv("x", "stem", 3, 16, 3, stride=2)                    # 16 x 16 x 16
    x = conv(x, "b1_dw", 16, 16, 3, group=16)                    # depthwise, stride 1
    x = conv(x, "b1_pj", 16, 8, 1, relu6=False)
    x = conv(x, "b2_ex", 8, 40, 1)                               # 40 channels: not a multiple of 16
    x = conv(x, "b2_dw", 40, 40, 3, stride=2, group=40)          # depthwise, stride 2 -> 8 x 8
    x = conv(x, "b2_pj", 40, 16, 1, relu6=False)
    r = x
    x = conv(x, "b3_ex", 16, 96, 1)
    x = conv(x, "b3_dw", 96, 96, 3, group=96)                    # depthwise, stride 1, 96 channels
    x = conv(x, "b3_pj", 96, 16, 1, relu6=False)
    nodes.append(helper.make_node("Add", [r, x], ["b3_add"], name="b3_add"))
    nodes.append(helper.make_node("GlobalAveragePool", ["b3_add"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    nodes.append(helper.make_node("Gemm", ["flat", w("fc_w", (10, 16), 16), b("fc_b", 10)], ["y"], name="fc", transB=1))
    g = helper.make_graph(nodes, "mini_mobilenet_v2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode != 0:
        fail(" ".join(cmd) + " exited " + str(p.returncode) + ":\n" + p.stdout[-3000:])
    return p.stdout


def main():
    ferry, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(38)
    model = os.path.join(work, "mini_mbv2.onnx")
    build(model, rng)
    calib = os.path.join(work, "calib.npz")
    np.savez(calib, x=rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    inputs = []
    for k in range(2):
        xin = os.path.join(work, "in%d.npy" % k)
        np.save(xin, (rng.standard_normal((1, 3, 32, 32)) * (1 + k)).astype(np.float32))
        inputs.append(xin)
    # The default file (on this tiny model the plain structure wins: float biases, oneDNN's depthwise) and
    # ferry's own structure (--no-plain-floor: int32 biases, the depthwise 3x3s on int8_depthwise_conv.cpp).
    for tag, extra in (("default", []), ("own", ["--no-plain-floor"])):
        q = os.path.join(work, "mini_mbv2.%s.int8.onnx" % tag)
        run([ferry, "quantize", model, "--calibration", calib, "--out", q, "-t", "1"] + extra)
        qm = onnx.load(q)
        dw = [n for n in qm.graph.node if n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute)]
        if len(dw) != 3:
            fail("%s: expected the 3 depthwise Convs in the quantized file, found %d" % (tag, len(dw)))
        producers = {o: n.op_type for n in qm.graph.node for o in n.output}
        int32_bias = all(producers.get(n.input[2]) == "DequantizeLinear" for n in dw)
        if tag == "own" and not int32_bias:
            fail("--no-plain-floor: the depthwise Convs' biases are not int32 (DequantizeLinear)")
        check(ferry, work, q, tag, inputs)
    print("OK: the int8 mini MobileNetV2 runs byte for byte as the reference kernels (2 files, 2 inputs, 1 and 2 threads)")


def check(ferry, work, q, tag, inputs):
    for k, xin in enumerate(inputs):
        ref_dir = os.path.join(work, "%s_ref%d" % (tag, k))
        run([ferry, "run", q, "-d", "cpu-ref", "-O", "2", "-i", "x=" + xin, "-o", ref_dir])
        ref = np.load(os.path.join(ref_dir, "y.npy"))
        if not np.all(np.isfinite(ref)) or np.ptp(ref) == 0:
            fail("the reference output is constant or not finite: %s" % ref)
        for t in ("1", "2"):
            cpu_dir = os.path.join(work, "%s_cpu%d_t%s" % (tag, k, t))
            run([ferry, "run", q, "-d", "cpu", "-t", t, "-i", "x=" + xin, "-o", cpu_dir])
            got = np.load(os.path.join(cpu_dir, "y.npy"))
            if got.dtype != ref.dtype or got.shape != ref.shape or got.tobytes() != ref.tobytes():
                fail("%s file, input %d, %s threads: cpu output differs from cpu-ref -O 2 (max |diff| %g)\ncpu %s\nref %s" %
                     (tag, k, t, float(np.max(np.abs(got.astype(np.float64) - ref))), got, ref))


if __name__ == "__main__":
    main()

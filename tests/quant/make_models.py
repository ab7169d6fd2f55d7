#!/usr/bin/env python3
"""Small float models and calibration data for ferry quantize's tests (and the int8 fusion pass).

  make_models.py OUT_DIR   writes:
    cnn.onnx   Conv+Relu, Conv, residual Add+Relu, MaxPool, Conv(+bias)+Clip(0,6), GlobalAveragePool,
               Flatten, Gemm (transB=1)                                  input "x" [N,3,16,16]
    mlp.onnx   MatMul + Add(bias) + Relu, MatMul, Add residual, Softmax   input "x" [N,8,32]
    cnn_calib.npz / mlp_calib.npz   32 samples each (arrays named after the inputs)
    cnn_test.npy / mlp_test.npy     4 other samples to evaluate on
Weights are seeded random (He-scaled), so the float outputs are non-trivial.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def cnn(rng):
    inits = [
        numpy_helper.from_array(he(rng, (8, 3, 3, 3), 27), "w1"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array(he(rng, (8, 8, 3, 3), 72), "w2"),
        numpy_helper.from_array(he(rng, (16, 8, 1, 1), 8), "w3"),
        numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b3"),
        numpy_helper.from_array(he(rng, (10, 16), 16), "fc_w"),
        numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "fc_b"),
        numpy_helper.from_array(np.array(0.0, np.float32), "clip_min"),
        numpy_helper.from_array(np.array(6.0, np.float32), "clip_max"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w3", "b3"], ["c3"], name="conv3"),
        helper.make_node("Clip", ["c3", "clip_min", "clip_max"], ["r3"], name="clip3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("Gemm", ["f1", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "tiny_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="ferry-tests")


def mlp(rng):
    inits = [
        numpy_helper.from_array(he(rng, (32, 64), 32), "w1"),
        numpy_helper.from_array((rng.standard_normal(64) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array(he(rng, (64, 32), 64), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "x"], ["a2"], name="residual"),
        helper.make_node("Softmax", ["a2"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(nodes, "tiny_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 32])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="ferry-tests")


def ln(rng):
    """A post-LN transformer piece as opset-13 exports it: MatMul+bias, residual Add, the decomposed
    LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta), MatMul+bias, Relu."""
    d = 32
    inits = [
        numpy_helper.from_array(he(rng, (d, d), d), "w1"),
        numpy_helper.from_array((rng.standard_normal(d) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "gamma"),
        numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "beta"),
        numpy_helper.from_array(he(rng, (d, 16), d), "w2"),
        numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b2"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Add", ["a1", "x"], ["r"], name="residual"),
        helper.make_node("ReduceMean", ["r"], ["mean"], name="ln_mean", axes=[-1]),
        helper.make_node("Sub", ["r", "mean"], ["d"], name="ln_sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="ln_pow"),
        helper.make_node("ReduceMean", ["d2"], ["var"], name="ln_var", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="ln_eps"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="ln_sqrt"),
        helper.make_node("Div", ["d", "sd"], ["nrm"], name="ln_div"),
        helper.make_node("Mul", ["nrm", "gamma"], ["sc"], name="ln_gamma"),
        helper.make_node("Add", ["sc", "beta"], ["h"], name="ln_beta"),
        helper.make_node("MatMul", ["h", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["a2"], name="fc2_bias"),
        helper.make_node("Relu", ["a2"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "tiny_ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="ferry-tests")


def main_into(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(21)
    for name, build, shape in (("cnn", cnn, (3, 16, 16)), ("mlp", mlp, (8, 32)), ("ln", ln, (8, 32))):
        m = build(rng)
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))
        data = rng.standard_normal((36,) + shape).astype(np.float32)
        np.savez(os.path.join(out, name + "_calib.npz"), x=data[:32])
        np.save(os.path.join(out, name + "_test.npy"), data[32:])


if __name__ == "__main__":
    main_into(sys.argv[1])

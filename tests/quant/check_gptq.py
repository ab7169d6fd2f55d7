#!/usr/bin/python3
"""`ferry quantize --weight-rounding gptq` on a tiny model (registered in tests/quant/ctest_snippet.cmake).

    check_gptq.py FERRY WORKDIR

The model (Conv 3x3 + Relu, Conv 1x1, GlobalAveragePool, Flatten, MatMul with a 2-D weight) reads
inputs whose channels are strongly correlated (a common part plus a little noise each), and its
weights are mostly 0.45 of an int8 step (one weight per output channel sets the scale): round to
nearest makes them all 0, with errors that add up over the correlated inputs; GPTQ spreads each
rounding error over the weights not yet rounded. Checks: the held-out output cosine to fp32 rises,
every weight was rounded by GPTQ, and the QDQ file has the same structure (nodes, their inputs,
the initializers and their shapes) with only int8 weight values changed.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_cli  # noqa: E402
from quant_cli import check, ferry, mean_cosine as cosine, outputs, structure, w  # noqa: E402

quant_cli.setup(sys.argv[1], sys.argv[2])


def small_weights(rng, shape, big_index):
    a = (0.45 / 127) * rng.choice([1.0, -1.0, 1.0], shape) * rng.uniform(0.8, 1.0, shape)
    a[big_index] = rng.choice([1.0, -1.0], a[big_index].shape)
    return a.astype(np.float32)


def make_model(path):
    rng = np.random.default_rng(11)
    c0, c1, c2, c3 = 8, 16, 16, 8
    w1 = small_weights(rng, (c1, c0, 3, 3), (np.arange(c1), np.arange(c1) % c0, 1, 1))
    b1 = rng.uniform(-0.02, 0.02, c1).astype(np.float32) + 0.05
    w2 = small_weights(rng, (c2, c1, 1, 1), (np.arange(c2), (np.arange(c2) * 5) % c1, 0, 0))
    b2 = rng.uniform(-0.02, 0.02, c2).astype(np.float32)
    w3 = small_weights(rng, (c2, c3), ((np.arange(c3) * 3) % c2, np.arange(c3)))
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3")]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "w3"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "gptq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c0, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def inputs(rng, n):
    common = rng.uniform(0, 1, (n, 1, 8, 8))
    return (common + 0.05 * rng.standard_normal((n, 8, 8, 8))).astype(np.float32)


def main():
    model = w("gptq.onnx")
    make_model(model)
    rng = np.random.default_rng(3)
    np.savez(w("calib.npz"), x=inputs(rng, 32))
    np.save(w("held.npy"), inputs(rng, 16))
    ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("plain.onnx"), "--method", "minmax", "--json", "--no-plain-floor")
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("gptq_q.onnx"), "--method", "minmax",
              "--weight-rounding", "gptq", "--holdout", w("held.npy"), "--json", "--no-plain-floor")
    rep = json.loads(p.stdout)
    ref = outputs(model, w("held.npy"), "float")
    c_plain = cosine(ref, outputs(w("plain.onnx"), w("held.npy"), "plain"))
    c_gptq = cosine(ref, outputs(w("gptq_q.onnx"), w("held.npy"), "gptq"))
    check(rep["weight_rounding"]["weights_gptq"] == 3, "--weight-rounding gptq: the 3 weights rounded by GPTQ (%d)"
          % rep["weight_rounding"]["weights_gptq"])
    check(1 - c_gptq < 0.7 * (1 - c_plain),
          "held-out output cosine to fp32 (ferry run): %.5f nearest, %.5f gptq" % (c_plain, c_gptq))
    check(abs(rep["holdout"]["mean"] - c_gptq) < 1e-4, "--holdout reports the same cosine (%.5f)" % rep["holdout"]["mean"])
    n0, i0, v0 = structure(w("plain.onnx"))
    n1, i1, v1 = structure(w("gptq_q.onnx"))
    changed = sorted(k for k in v0 if not np.array_equal(v0[k], v1[k]))
    check(n0 == n1 and i0 == i1 and len(changed) == 3 and all(i0[k][0] == TensorProto.INT8 for k in changed),
          "same QDQ structure; only the int8 weights changed (%s)" % ", ".join(changed))
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("bad.onnx"), "--weight-rounding", "best",
              expect=2)
    check(p.returncode == 2 and "--weight-rounding" in p.stderr and not os.path.exists(w("bad.onnx")),
          "--weight-rounding best: exit 2, named, nothing written")
    print("all GPTQ checks passed")


if __name__ == "__main__":
    main()

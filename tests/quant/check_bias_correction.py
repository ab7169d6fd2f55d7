#!/usr/bin/python3
"""`ferry quantize --bias-correction` on a tiny conv model (registered in tests/quant/ctest_snippet.cmake).

    check_bias_correction.py FERRY WORKDIR

The model (Conv 3x3 + Relu, Conv 1x1) has weights whose int8 rounding errors all have one sign
(per output channel one weight sets the scale, the others are 0.45 of a step and round to 0), and
inputs in [0, 1]: the int8 conv outputs are shifted by a per-channel constant, which bias
correction measures on the calibration data and takes out of the int32 biases. Checks: the output
cosine to fp32 on held-out data rises, and the QDQ file has the same structure (nodes, their
inputs, the initializers and their shapes) with only int32 bias values changed.
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


def make_model(path):
    rng = np.random.default_rng(7)
    c1 = 16
    w1 = (np.full((c1, 3, 3, 3), 0.45 / 127) * rng.choice([1, 1, 1, -1], (c1, 3, 3, 3))).astype(np.float32)
    w1[np.arange(c1), np.arange(c1) % 3, 1, 1] = 1.0
    b1 = rng.uniform(-0.05, 0.05, c1).astype(np.float32)
    # conv2: output c = 0.5 (r1[c] - r1[c + 4]) (zero mean, so that a constant shift costs cosine),
    # plus small weights that all round to 0.
    w2 = np.full((4, c1, 1, 1), 0.45 * 0.5 / 127, np.float32)
    w2[np.arange(4), np.arange(4), 0, 0] = 0.5
    w2[np.arange(4), np.arange(4) + 4, 0, 0] = -0.5
    b2 = rng.uniform(-0.01, 0.01, 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "bias_shift", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def main():
    model = w("bias_shift.onnx")
    make_model(model)
    rng = np.random.default_rng(1)
    np.savez(w("calib.npz"), x=rng.uniform(0, 1, (32, 3, 8, 8)).astype(np.float32))
    np.save(w("held.npy"), rng.uniform(0, 1, (16, 3, 8, 8)).astype(np.float32))
    ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("plain.onnx"), "--method", "minmax", "--json", "--no-plain-floor")
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("bc.onnx"), "--method", "minmax",
              "--bias-correction", "--holdout", w("held.npy"), "--json", "--no-plain-floor")
    rep = json.loads(p.stdout)
    ref = outputs(model, w("held.npy"), "float")
    c_plain = cosine(ref, outputs(w("plain.onnx"), w("held.npy"), "plain"))
    c_bc = cosine(ref, outputs(w("bc.onnx"), w("held.npy"), "bc"))
    check(rep["bias_correction"]["biases"] == 2, "--bias-correction: both biases corrected")
    check(c_bc > c_plain + 0.001,
          "held-out output cosine to fp32 (ferry run): %.5f without, %.5f with bias correction" % (c_plain, c_bc))
    check(abs(rep["holdout"]["mean"] - c_bc) < 1e-4 and abs(rep["holdout"]["without_bias_correction"] - c_plain) < 1e-4,
          "--holdout reports the same cosines (%.5f, %.5f)" % (rep["holdout"]["mean"],
                                                               rep["holdout"]["without_bias_correction"]))
    n0, i0, v0 = structure(w("plain.onnx"))
    n1, i1, v1 = structure(w("bc.onnx"))
    changed = sorted(k for k in v0 if not np.array_equal(v0[k], v1[k]))
    check(n0 == n1 and i0 == i1 and len(changed) == 2 and all(i0[k][0] == TensorProto.INT32 for k in changed),
          "same QDQ structure; only the int32 biases changed (%s)" % ", ".join(changed))
    # --target-cosine after bias correction: the corrected file already reaches what the plain one
    # (0.998 here) would keep layers in float for.
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("tc.onnx"), "--method", "minmax",
              "--bias-correction", "--target-cosine", "0.9995", "--json", "--no-plain-floor")
    rep = json.loads(p.stdout)
    check(rep["target_reached"] and not rep["kept_for_target"] and rep["output_cosine"]["mean"] >= 0.9995,
          "--bias-correction --target-cosine 0.9995: reached (%.5f) with no layer kept in float"
          % rep["output_cosine"]["mean"])
    np.save(w("bad.npy"), np.zeros((2, 3, 4, 4), np.float32))
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("bad.onnx"), "--holdout", w("bad.npy"),
              expect=2)
    check(p.returncode == 2 and "--holdout" in p.stderr and "'x'" in p.stderr and not os.path.exists(w("bad.onnx")),
          "--holdout data of the wrong shape: exit 2, named, nothing written")
    print("all bias correction checks passed")


if __name__ == "__main__":
    main()

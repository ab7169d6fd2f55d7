#!/usr/bin/python3
"""`ferry quantize` end to end through the CLI (registered in tests/quant/ctest_snippet.cmake).

    check_quantize.py FERRY WORKDIR

Small generated models (tests/quant/make_models.py): a CNN (Conv+Relu, residual Add, MaxPool,
Conv+Clip, GlobalAveragePool, Gemm) and an MLP (MatMul+Add bias, residual Add, Softmax).
Checks: the QDQ file's structure (every quantized op wrapped, int8 per-channel weights that
dequantize to the float ones, int32 biases with scale s_x*s_w, positive scales, zero points in
range), ferry's outputs of the int8 model against the float model's (cosine), the calibration
sources (.npz, .npy folder, image folder), the methods, --keep-fp32, --target-cosine, `ferry
compare` of the int8 model against the float one, and the bad inputs (exit 2, named).
Needs Debian's /usr/bin/python3 (numpy, onnx, PIL).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models  # noqa: E402

import quant_cli  # noqa: E402
from quant_cli import check, ferry, w  # noqa: E402

quant_cli.setup(sys.argv[1], sys.argv[2])
WORK = quant_cli.WORK


def run_outputs(model, inp):
    out = w("out_" + os.path.basename(model))
    ferry("run", model, "--input", "x=" + inp, "--output-dir", out)
    return np.load(os.path.join(out, "y.npy"))


def cosine(a, b):
    a, b = a.reshape(a.shape[0], -1).astype(np.float64), b.reshape(b.shape[0], -1).astype(np.float64)
    return float(np.min(np.sum(a * b, 1) / np.sqrt(np.sum(a * a, 1) * np.sum(b * b, 1))))


def check_structure(path, float_path):
    m = onnx.load(path)
    onnx.checker.check_model(m)
    fm = onnx.load(float_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    finits = {t.name: numpy_helper.to_array(t) for t in fm.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    consumers = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    name = os.path.basename(path)
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            s, z = inits[n.input[1]], inits[n.input[2]]
            check_ok = np.all(s > 0) and np.all(np.isfinite(s))
            if not check_ok:
                sys.exit("FAIL: %s: %s scale %s not positive" % (name, n.name, s))
            if z.dtype == np.uint8:
                pass  # in range by type
            elif z.dtype in (np.int8, np.int32):
                if np.any(z != 0):
                    sys.exit("FAIL: %s: %s: weight/bias zero points must be 0" % (name, n.name))
            else:
                sys.exit("FAIL: %s: %s zero point dtype %s" % (name, n.name, z.dtype))
    def int32_dq(v):
        p = producer.get(v)
        return p is not None and p.op_type == "DequantizeLinear" and p.input[0] in inits and inits[p.input[0]].dtype == np.int32

    def bias_add(n):  # Add(MatMul output, int32 bias): taken into the MatMul
        return n.op_type == "Add" and any(int32_dq(v) for v in n.input) and any(
            producer.get(v) is not None and producer[v].op_type == "MatMul" for v in n.input)

    def float_add(n):  # an Add with an activation input that is a float value (graph input, float op): stays float
        return n.op_type == "Add" and any(i not in inits and (producer.get(i) is None or
                                                              producer[i].op_type != "DequantizeLinear")
                                          for i in n.input)

    wrapped = 0
    for n in m.graph.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul", "Add") or bias_add(n) or float_add(n):
            continue
        for k, i in enumerate(n.input):
            p = producer.get(i)
            if p is None or p.op_type != "DequantizeLinear":
                sys.exit("FAIL: %s: %s input %d '%s' does not come from a DequantizeLinear" % (name, n.name, k, i))
        out = n.output[0]
        users = consumers.get(out, [])
        if len(users) == 1 and bias_add(users[0]):
            users = consumers.get(users[0].output[0], [])
        if len(users) == 1 and users[0].op_type in ("Relu", "Clip"):
            users = consumers.get(users[0].output[0], [])
        if not users or any(u.op_type != "QuantizeLinear" for u in users):
            sys.exit("FAIL: %s: the output of %s is not consumed by QuantizeLinear only: %s" %
                     (name, n.name, [u.op_type for u in users]))
        if n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1].endswith("_DequantizeLinear_Output"):
            dq = producer[n.input[1]]
            q, s = inits[dq.input[0]], inits[dq.input[1]]
            axis = [a.i for a in dq.attribute if a.name == "axis"][0]
            check_w = q.dtype == np.int8 and np.all(np.abs(q.astype(np.int32)) <= 127)
            if not check_w:
                sys.exit("FAIL: %s: %s weight is not int8 in [-127, 127]" % (name, n.name))
            if s.shape != (q.shape[axis],):
                sys.exit("FAIL: %s: %s weight scale %s is not per channel along axis %d of %s" %
                         (name, n.name, s.shape, axis, q.shape))
            fw = finits[dq.input[0][:-len("_quantized")]]
            shape = [1] * q.ndim
            shape[axis] = -1
            deq = q.astype(np.float32) * s.reshape(shape)
            err = np.abs(deq - fw) - s.reshape(shape) / 2
            if np.any(err > 1e-6):
                sys.exit("FAIL: %s: %s weight does not dequantize to the float weight" % (name, n.name))
            if len(n.input) > 2:
                bdq = producer[n.input[2]]
                bq, bs = inits[bdq.input[0]], inits[bdq.input[1]]
                xs = inits[producer[n.input[0]].input[1]]
                if bq.dtype != np.int32 or not np.allclose(bs, xs * s, rtol=1e-6):
                    sys.exit("FAIL: %s: %s bias is not int32 with scale s_x*s_w" % (name, n.name))
        wrapped += 1
    check(wrapped > 0, "%s: %d Conv/Gemm/MatMul/Add nodes all wrapped in Q/DQ (int8 per-channel weights, int32 biases)"
          % (name, wrapped))
    return m


def main():
    make_models.main_into(WORK)
    cnn, mlp = w("cnn.onnx"), w("mlp.onnx")

    # The CNN and the MLP, the default method (percentile): structure and outputs through ferry.
    for model, thr in ((cnn, 0.999), (mlp, 0.995)):
        base = model[:-5]
        q = base + ".int8.onnx"
        # --no-plain-floor: the all-int8 structure of docs/quantization.md's conventions, checked below.
        p = ferry("quantize", model, "--calibration", base + "_calib.npz", "--out", q, "--json", "--no-plain-floor")
        rep = json.loads(p.stdout)
        check(rep["samples"] == 32 and rep["output_cosine"]["mean"] >= thr,
              "%s quantized: output cosine on the calibration data %.5f" % (model, rep["output_cosine"]["mean"]))
        check_structure(q, model)
        ref, got = run_outputs(model, base + "_test.npy"), run_outputs(q, base + "_test.npy")
        c = cosine(ref, got)
        check(c >= thr and np.max(np.abs(ref - got)) > 0,
              "%s: ferry runs the int8 model, held-out cosine to fp32 %.5f (>= %g), not bit-identical" % (model, c, thr))

    # The MLP's residual Add reads the graph input x (a float value): it stays float and reads x itself.
    m = onnx.load(mlp[:-5] + ".int8.onnx")
    res = [n for n in m.graph.node if n.name == "residual"][0]
    check("x" in res.input, "mlp: the residual Add of a float value (graph input x) stays float and reads x unrounded")

    # A post-LN piece: the LayerNorm decomposition stays float and unwrapped (so layernorm_fusion
    # matches it), the residual Add after a float value stays float, --method auto keeps the best.
    lnm = w("ln.onnx")
    p = ferry("quantize", lnm, "--calibration", w("ln_calib.npz"), "--out", w("ln.int8.onnx"), "--method", "auto",
              "--json", "--no-plain-floor")
    rep = json.loads(p.stdout)
    mc = rep.get("method_cosines", {})
    order = ["percentile", "minmax", "entropy", "mse"]  # tried in this order; a tie keeps the earlier
    best = max(order, key=lambda k: (mc.get(k, -2), -order.index(k)))
    check(sorted(mc) == sorted(order) and rep["method"] == best
          and abs(rep["output_cosine"]["mean"] - mc[rep["method"]]) < 1e-9 and rep["output_cosine"]["mean"] >= 0.995,
          "--method auto: tried %s, kept %s (cosine %.5f)" % (mc, rep["method"], rep["output_cosine"]["mean"]))
    m = check_structure(w("ln.int8.onnx"), lnm)
    producer = {o: n for n in m.graph.node for o in n.output}
    ln_nodes = [n for n in m.graph.node if n.name.startswith("ln_") or n.name == "residual"]
    from_dq = [(n.name, i) for n in ln_nodes for i in n.input if i in producer and producer[i].op_type == "DequantizeLinear"
               and not (n.name == "residual" and producer[i].input[0].startswith("a1"))]
    quantized_ln = [n.name for n in m.graph.node if n.op_type == "QuantizeLinear" and
                    n.input[0] in ("r", "mean", "d", "d2", "var", "ve", "sd", "nrm", "sc")]
    check(len(ln_nodes) == 10 and not from_dq and not quantized_ln,
          "ln: the LayerNorm decomposition and the residual Add read no dequantized value but fc1's output "
          "(%s) and nothing inside is quantized (%s)" % (from_dq, quantized_ln))
    p = ferry("profile", w("ln.int8.onnx"), "-t", "1", "-n", "2", "-w", "1", "--json")
    ops = {o["op_type"]: o["nodes"] for o in json.loads(p.stdout)["op_types"]}
    check(ops.get("com.ferry.LayerNorm") == 1 and ops.get("com.ferry.QMatMulFused") == 2,
          "ln: ferry fuses the LayerNorm and both MatMul+bias into QMatMulFused: %s" % ops)
    ref, got = run_outputs(lnm, w("ln_test.npy")), run_outputs(w("ln.int8.onnx"), w("ln_test.npy"))
    check(cosine(ref, got) >= 0.995, "ln: held-out cosine to fp32 %.5f" % cosine(ref, got))

    # Methods and calibration sources.
    for method in ("minmax", "entropy", "mse"):
        p = ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", w("cnn.%s.onnx" % method),
                  "--method", method, "--json")
        rep = json.loads(p.stdout)
        check(rep["output_cosine"]["mean"] >= 0.995, "--method %s: cosine %.5f" % (method, rep["output_cosine"]["mean"]))
    x = np.load(w("cnn_calib.npz"))["x"]
    os.makedirs(w("npy_folder"), exist_ok=True)
    np.save(w("npy_folder/a.npy"), x[:16])
    np.savez(w("npy_folder/b.npz"), x=x[16:])
    rep = json.loads(ferry("quantize", cnn, "--calibration", w("npy_folder"), "--out", w("cnn.folder.onnx"),
                           "--json").stdout)
    check(rep["samples"] == 32, "a folder of .npy/.npz: 32 samples")
    from PIL import Image
    rng = np.random.default_rng(3)
    for cls in ("a", "b"):
        os.makedirs(w("images/" + cls), exist_ok=True)
        for k in range(5):
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(w("images/%s/%d.png" % (cls, k)))
    p = ferry("quantize", cnn, "--calibration", w("images"), "--image-size", 16, "--out", w("cnn.img.onnx"), "--json")
    rep = json.loads(p.stdout)
    check(rep["samples"] == 10 and "only 10 calibration samples" in p.stderr,
          "an image folder with --image-size: 10 samples, warned as too few")

    # --keep-fp32: conv2 stays float (float weight, float input), the rest is quantized.
    ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", w("cnn.keep.onnx"), "--keep-fp32", "conv2",
          "--no-plain-floor")
    m = onnx.load(w("cnn.keep.onnx"))
    conv2 = [n for n in m.graph.node if n.name == "conv2"][0]
    check(conv2.input[1] == "w2" and conv2.input[0] == "r1" and "w2" in [t.name for t in m.graph.initializer],
          "--keep-fp32 conv2: float weight w2 and the float input r1")

    # --target-cosine: layers kept until the cosine is reached, with the reason.
    p = ferry("quantize", mlp, "--calibration", w("mlp_calib.npz"), "--out", w("mlp.target.onnx"),
              "--target-cosine", "0.99995", "--json", "--no-plain-floor")
    rep = json.loads(p.stdout)
    check(rep["target_reached"] and rep["output_cosine"]["mean"] >= 0.99995 and rep["kept_for_target"]
          and rep["output_cosine"]["before_repair"] < 0.99995
          and all(k["probe_cosine_this_layer_float"] > k["probe_cosine_all_quantized"] for k in rep["kept_for_target"]),
          "--target-cosine 0.99995: %.6f -> %.6f keeping %s" % (rep["output_cosine"]["before_repair"],
                                                                rep["output_cosine"]["mean"],
                                                                [k["node"] for k in rep["kept_for_target"]]))
    m = onnx.load(w("mlp.target.onnx"))
    kept = rep["kept_for_target"][0]["node"]
    node = [n for n in m.graph.node if n.name == kept][0]
    check(not any(i.endswith("_DequantizeLinear_Output") for i in node.input),
          "the kept layer %s reads float values (%s)" % (kept, list(node.input)))

    # ferry compare: the int8 model against the float one, layer by layer.
    p = ferry("compare", w("cnn.int8.onnx"), "--ref-model", cnn, "--target", "cpu:fp32:0", "--per-layer", "--input",
              "x=" + w("cnn_test.npy"), "--cosine-min", "0.999", "--max-abs", "1", "--json", expect=0)
    doc = json.loads(p.stdout)
    layers = {l["value"]: l["metrics"]["cosine"] for l in doc["layers"]}
    want = {"c1", "r1", "c2", "a1", "r2", "p1", "c3", "r3", "g1", "f1", "y"}
    check(want <= set(layers) and all(0.999 <= layers[v] < 1.0 for v in want),
          "ferry compare --ref-model: the int8 model's %d layers matched by name with the float model's, cosines %.5f..%.5f"
          % (len(layers), min(layers.values()), max(layers.values())))

    # Bad inputs.
    np.savez(w("bad_shape.npz"), x=np.zeros((4, 3, 8, 8), np.float32))
    p = ferry("quantize", cnn, "--calibration", w("bad_shape.npz"), "--out", w("bad.onnx"), expect=2)
    check("'x'" in p.stderr and "[4,3,8,8]" in p.stderr and "16" in p.stderr and not os.path.exists(w("bad.onnx")),
          "calibration arrays of the wrong shape: named input, expected and given shape, exit 2")
    p = ferry("quantize", w("cnn.int8.onnx"), "--calibration", w("cnn_calib.npz"), "--out", w("again.onnx"), expect=2)
    check("already quantized" in p.stderr and not os.path.exists(w("again.onnx")),
          "an already quantized model: said so, nothing written, exit 2")
    p = ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", w("bad.onnx"), "--keep-fp32", "nope",
              expect=2)
    check("'nope'" in p.stderr, "--keep-fp32 of an unknown node: exit 2, named")
    p = ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", cnn, expect=2)
    check("source model" in p.stderr, "--out the source model: refused")
    p = ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", w("bad.onnx"), "--method", "kl",
              expect=2)
    check("minmax" in p.stderr, "an unknown --method: exit 2 with the choices")

    # An op ferry does not quantize stays float and is listed.
    rng = np.random.default_rng(5)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig"),
         helper.make_node("Conv", ["s1", "w2"], ["y"], name="conv2")],
        "sig", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), w("sig.onnx"))
    np.savez(w("sig_calib.npz"), x=rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    p = ferry("quantize", w("sig.onnx"), "--calibration", w("sig_calib.npz"), "--out", w("sig.int8.onnx"), "--no-plain-floor")
    check("Sigmoid" in p.stdout and "sig" in p.stdout and "quantized 2 nodes" in p.stdout,
          "Sigmoid stays float and is listed; both convs quantized")
    # The default (never below plain MinMax): at least the plain structure's cosine on the calibration data.
    rep = json.loads(ferry("quantize", cnn, "--calibration", w("cnn_calib.npz"), "--out", w("cnn.floor.onnx"),
                           "--json").stdout)
    pf = rep["plain_floor"]
    check(pf["on"] and pf["plain_cosine"] > 0.99 and rep["output_cosine"]["mean"] >= pf["plain_cosine"],
          "default: output cosine %.6f >= the plain MinMax structure's %.6f" % (rep["output_cosine"]["mean"],
                                                                           pf["plain_cosine"]))
    print("all quantize checks passed")


if __name__ == "__main__":
    main()

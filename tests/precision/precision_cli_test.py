#!/usr/bin/python3
"""ferry compare / precision modes, end to end through the CLI.

    precision_cli_test.py FERRY WORKDIR overflow          # overflow model: first diverging node, --fix
    precision_cli_test.py FERRY WORKDIR dataset MODEL     # 32 seeded inputs, fp16 + bf16, per layer, HTML
    precision_cli_test.py FERRY WORKDIR zoo CASE_DIR      # a zoo case: same, on its input shape

Needs Debian's /usr/bin/python3 (numpy, onnx). Exits non-zero with the failing check.
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FERRY = sys.argv[1]
WORK = sys.argv[2]
MODE = sys.argv[3]
os.makedirs(WORK, exist_ok=True)


def ferry(*args, expect=None):
    cmd = [FERRY] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if expect is not None and p.returncode != expect:
        sys.exit("FAIL: %s\nexit %d (expected %d)\nstdout:\n%s\nstderr:\n%s" %
                 (" ".join(cmd), p.returncode, expect, p.stdout[-4000:], p.stderr[-4000:]))
    return p


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def seeded_dataset(folder, inputs, n=32):
    """n .npz samples for inputs [(name, shape, dtype)], seeds 0..n-1."""
    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        rng = np.random.default_rng(i)
        arrays = {name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in inputs}
        np.savez(os.path.join(folder, "sample_%02d.npz" % i), **arrays)


def overflow_model(path):
    """x[1,64] -> proj (MatMul) -> relu -> scale_up (Mul x30000: over fp16's 65504) -> ln
    (LayerNormalization) -> head (MatMul) -> logits[1,10]."""
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((64, 64)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((64, 10)) * 0.05).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(30000.0, np.float32), "scale"),
             numpy_helper.from_array(np.ones(64, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(64, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="proj"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "scale"], ["big"], name="scale_up"),
             helper.make_node("LayerNormalization", ["big", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n", "w2"], ["logits"], name="head")]
    g = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def test_overflow():
    model = os.path.join(WORK, "overflow.onnx")
    overflow_model(model)
    data = os.path.join(WORK, "overflow_inputs")
    seeded_dataset(data, [("x", (1, 64), np.float32)])
    # fp32 on the optimized cpu backend passes; fp16 overflows in scale_up.
    ferry("compare", model, "--ref", "cpu-ref:fp32", "--target", "cpu:fp32", "--inputs-dir", data, expect=0)
    p = ferry("compare", model, "--ref", "cpu-ref:fp32", "--target", "cpu:fp16", "--inputs-dir", data, "--per-layer",
              "--json", expect=2)
    doc = json.loads(p.stdout)
    check(doc["samples"] == 32 and not doc["passed"], "fp16 fails on the overflow model (32 samples)")
    check(doc["first_diverging"]["node"] == "scale_up", "first diverging node is scale_up (got %s)" % doc["first_diverging"])
    check(doc["first_non_finite"]["node"] == "scale_up", "first NaN/inf is produced by scale_up")
    # --fix: force_fp16 needs scale_up and ln (ln reads scale_up's value through an fp16 Cast).
    cfg = os.path.join(WORK, "fix_fp16.json")
    report = os.path.join(WORK, "overflow_report.html")
    p = ferry("compare", model, "--ref", "cpu-ref:fp32", "--target", "cpu:fp16", "--inputs-dir", data, "--fix", cfg,
              "--per-layer", "--json", "--report", report, expect=0)
    doc = json.loads(p.stdout)
    fix = doc["fix"]
    check(fix["found"] and fix["verified_passed"], "--fix finds a config and verifies it")
    check(sorted(fix["config_names"]) == ["ln", "scale_up"], "fix keeps scale_up and ln (got %s)" % fix["config_names"])
    check(json.load(open(cfg))["keep_fp32"] == fix["config_names"], "the config file holds the fix")
    # The config, applied by a user, passes.
    ferry("compare", model, "--ref", "cpu-ref:fp32", "--target", "cpu:fp16", "--inputs-dir", data,
          "--precision-config", cfg, expect=0)
    # Mixed precision keeps LayerNorm in fp32 already: the fix is scale_up alone.
    cfg_mix = os.path.join(WORK, "fix_mix.json")
    p = ferry("compare", model, "--target", "cpu:allow_mix_precision", "--inputs-dir", data, "--fix", cfg_mix,
              "--json", expect=0)
    check(json.loads(p.stdout)["fix"]["config_names"] == ["scale_up"], "mixed precision: the fix is scale_up alone")
    # ferry run --precision reports the overflow.
    p = ferry("run", model, "--input", os.path.join(data, "sample_00.npz"), "--precision", "fp16", expect=0)
    check("scale_up" in p.stderr and "inf" in p.stderr, "ferry run --precision fp16 names the overflowing node")
    p = ferry("run", model, "--input", os.path.join(data, "sample_00.npz"), "--precision", "fp16",
              "--precision-config", cfg, expect=0)
    check("non-finite" not in p.stderr, "ferry run with the fix config has no overflow")
    ferry("run", model, "--input", os.path.join(data, "sample_00.npz"), "--precision", "fp16", "--keep-fp32", "nope",
          expect=2)
    html = open(report).read()
    check("<svg" in html and "scale_up" in html and "http" not in html.replace("http://www.w3.org/2000/svg", ""),
          "HTML report is self-contained with the chart and the node")


def test_dataset(model, inputs, label):
    data = os.path.join(WORK, label + "_inputs")
    seeded_dataset(data, inputs)
    rows = []
    for prec in ("fp16", "bf16"):
        report = os.path.join(WORK, "%s_%s.html" % (label, prec))
        p = ferry("compare", model, "--ref", "cpu-ref:fp32", "--target", "cpu:" + prec, "--inputs-dir", data,
                  "--per-layer", "--json", "--report", report)
        check(p.returncode in (0, 2), "%s %s: compare ran (exit %d) %s" % (label, prec, p.returncode, p.stderr[-2000:]))
        doc = json.loads(p.stdout)
        check(doc["samples"] == 32, "%s %s: 32 samples" % (label, prec))
        check(len(doc["layers"]) >= 5, "%s %s: per-layer values compared (%d)" % (label, prec, len(doc["layers"])))
        out = doc["outputs"][0]
        cos = out["worst"]["cosine"]
        check(isinstance(cos, float) and cos > 0.9 and cos < 1.0,
              "%s %s: low precision shows (0.9 < worst cosine %s < 1)" % (label, prec, cos))
        if "top1_agreement" in out:
            check(out["top1_agreement"] >= 0.8, "%s %s: top-1 agreement %.3f" % (label, prec, out["top1_agreement"]))
        check(os.path.getsize(report) > 1000 and "ferry-data" in open(report).read(), "%s %s: HTML report" % (label, prec))
        rows.append((prec, cos, out["worst"]["max_abs"], out.get("top1_agreement")))
    for r in rows:
        print("%s %s: worst cosine %.6f, max abs %.4g, top-1 %s" % ((label,) + r))


if MODE == "overflow":
    test_overflow()
elif MODE == "dataset":
    test_dataset(sys.argv[4], [("image", (1, 1, 28, 28), np.float32)], "demo")
elif MODE == "zoo":
    case = sys.argv[4]
    meta = json.load(open(os.path.join(case, "meta.json")))
    ins = [(n, tuple(s), np.dtype(d)) for n, s, d in zip(meta["inputs"], meta["input_shapes"], meta["input_dtypes"])]
    test_dataset(os.path.join(case, "model.onnx"), ins, meta["case"])
else:
    sys.exit("unknown mode " + MODE)
print("PASS")

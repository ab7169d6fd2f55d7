#!/usr/bin/python3
"""`ferry quantize --reduce-range` (7-bit weights) on a tiny model (registered in tests/quant/ctest_snippet.cmake).

    check_reduce_range.py FERRY WORKDIR

The model: Conv 3x3 (group 1) + Relu, a depthwise Conv 3x3 (group = channels), Conv 1x1, GlobalAveragePool,
Flatten, MatMul (2-D weight) + bias Add. Checks:
- --reduce-range: every int8 weight of a group-1 Conv and of the MatMul lies in [-64, 64] with a channel at
  +-64 (scale a * max|W_c| / 64, a <= 1 chosen by squared error; ONNX Runtime's reduce_range has a = 1); the depthwise Conv's stays 8-bit (+-127); the
  file runs in ferry and stays close to the float model; --json says so;
- --no-reduce-range: every weight 8-bit (a channel at +-127);
- the default (no flag): the --json choice follows the rule of docs/quantization.md "Reduce range": on a
  host whose int8 pairs saturate (no VNNI) 7-bit exactly when its measured cosine reaches the plain
  floor's, and the written weights match the choice; elsewhere 8-bit with nothing measured; on the same
  model with its weights on the 7-bit grid (7 bits exact, 8 bits not), 7-bit on such a host, only where
  8 bits cost the split: the first Conv (its input has a zero point) and the MatMul, not the Conv reading
  a Relu (zero point 0) nor the depthwise one; with the MatMul's weights where 7 bits round worst instead (the
  all-7-bit candidate below the floor), the MatMul alone put back to 8 bits and the first Conv's kept 7-bit, with
  --json layers_7bit / layers_8bit_restored saying so;
- both flags: exit 2, named, nothing written.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_cli  # noqa: E402
from quant_cli import check, ferry, mean_cosine as cosine, outputs, w  # noqa: E402

quant_cli.setup(sys.argv[1], sys.argv[2])


def make_model(path, snap=False, mixed=False):
    """snap: every weight on its channel's 7-bit grid (k * max|W_c| / 64), which 7 bits hold exactly.
    mixed: as snap, but the MatMul's weight w3 on its 8-bit grid at the steps 7 bits round worst (each column one
    weight at max|W_c|, the others at +-1 or +-3 steps of max|W_c| / 127, which 7 bits make +-1/64 and +-2/64 of it):
    7 bits cost almost all of the accuracy there and none on w1."""
    rng = np.random.default_rng(5)
    c0, c1, c2, c3 = 4, 8, 12, 6
    arrs = {"w1": rng.standard_normal((c1, c0, 3, 3)) * 0.3, "b1": rng.standard_normal(c1) * 0.1,
            "wd": rng.standard_normal((c1, 1, 3, 3)) * 0.4, "bd": rng.standard_normal(c1) * 0.1,
            "w2": rng.standard_normal((c2, c1, 1, 1)) * 0.3, "b2": rng.standard_normal(c2) * 0.1,
            "w3": rng.standard_normal((c2, c3)) * 0.3, "b3": rng.standard_normal(c3) * 0.1}
    if snap:
        for n, axis in (("w1", 0), ("wd", 0), ("w2", 0), ("w3", 1)):
            a = np.moveaxis(arrs[n], axis, 0)
            step = np.abs(a.reshape(a.shape[0], -1)).max(axis=1).reshape((-1,) + (1,) * (a.ndim - 1)) / 64
            arrs[n] = np.moveaxis(np.round(a / step) * step, 0, axis)
    if mixed:
        k = rng.choice([-3.0, -1.0, 1.0, 3.0], size=(c2, c3))
        k[rng.integers(0, c2, size=c3), np.arange(c3)] = 127.0
        arrs["w3"] = k * (0.5 / 127)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrs.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["cd"], name="dw", pads=[1, 1, 1, 1], group=c1),
             helper.make_node("Relu", ["cd"], ["rd"], name="relud"),
             helper.make_node("Conv", ["rd", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "w3"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "b3"], ["y"], name="fc_bias")]
    g = helper.make_graph(nodes, "rr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c0, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def int8_weights(path):
    """The int8 weight initializers by their float original's name (w1, wd, w2, w3): (values, scales)."""
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and inits.get(n.input[0]) is not None and inits[n.input[0]].dtype == np.int8:
            base = n.input[0][:-len("_quantized")] if n.input[0].endswith("_quantized") else n.input[0]
            out[base] = (inits[n.input[0]].astype(np.int32), inits[n.input[1]])
    return out


def channel_max(q, axis):
    return np.abs(np.moveaxis(q, axis, 0).reshape(q.shape[axis], -1)).max(axis=1)


def main():
    model = w("rr.onnx")
    make_model(model)
    rng = np.random.default_rng(7)
    np.savez(w("calib.npz"), x=rng.standard_normal((24, 4, 8, 8)).astype(np.float32))
    np.save(w("held.npy"), rng.standard_normal((8, 4, 8, 8)).astype(np.float32))
    axes = {"w1": 0, "wd": 0, "w2": 0, "w3": 1}
    ref = outputs(model, w("held.npy"), "float")

    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("r7.onnx"), "--reduce-range", "--json")
    rep = json.loads(p.stdout)
    q7 = int8_weights(w("r7.onnx"))
    check(sorted(q7) == ["w1", "w2", "w3", "wd"], "four int8 weights (%s)" % ", ".join(sorted(q7)))
    for name in ("w1", "w2", "w3"):
        q, _ = q7[name]
        cm = channel_max(q, axes[name])
        check(q.min() >= -64 and q.max() <= 64 and np.all(cm == 64),
              "--reduce-range: %s in [-64, 64], every channel's largest at 64 (%d..%d)" % (name, q.min(), q.max()))
    qd, _ = q7["wd"]
    check(np.all(channel_max(qd, 0) == 127), "--reduce-range: the depthwise weight stays 8-bit (+-127)")
    check(rep["reduce_range"]["on"] and rep["reduce_range"]["mode"] == "on" and rep["reduce_range"]["weight_range"] == [-64, 64],
          "--json: reduce_range on, mode on, weight_range [-64, 64]")
    c7 = cosine(ref, outputs(w("r7.onnx"), w("held.npy"), "r7"))
    check(c7 > 0.99, "the 7-bit file runs in ferry: held-out cosine to fp32 %.5f" % c7)

    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("r8.onnx"), "--no-reduce-range", "--json")
    rep8 = json.loads(p.stdout)
    q8 = int8_weights(w("r8.onnx"))
    for name in ("w1", "wd", "w2", "w3"):
        q, _ = q8[name]
        check(np.all(channel_max(q, axes[name]) == 127), "--no-reduce-range: %s 8-bit (every channel at 127)" % name)
    check(not rep8["reduce_range"]["on"] and rep8["reduce_range"]["mode"] == "off", "--json: reduce_range off")
    c8 = cosine(ref, outputs(w("r8.onnx"), w("held.npy"), "r8"))
    check(c8 >= c7 - 1e-4, "8-bit at least as close held out as 7-bit here (%.5f, %.5f)" % (c8, c7))

    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("auto.onnx"), "--json")
    ra = json.loads(p.stdout)["reduce_range"]
    qa = int8_weights(w("auto.onnx"))
    written7 = any(bool(np.all(channel_max(qa[n][0], axes[n]) == 64)) for n in ("w1", "w2", "w3"))
    if ra["host_pairs_saturate"]:
        check(ra["cosine_7bit"] > 0 and ra["cosine_8bit"] > 0, "default on a host without VNNI: both measured (%.5f, %.5f)"
              % (ra["cosine_7bit"], ra["cosine_8bit"]))
        plain = json.loads(p.stdout)["plain_floor"]["plain_cosine"]
        bar = plain + max(0.0, ra["cosine_8bit"] - plain) / 2
        check(abs(ra["cosine_bar"] - bar) < 1e-9, "default: the bar is the plain floor + half the 8-bit margin (%.6f)" % bar)
        reached = ra["cosine_7bit"] >= bar or (ra["layers_8bit_restored"] and ra["cosine_mixed"] >= bar)
        check(ra["on"] == bool(reached),
              "default: 7-bit exactly when its cosine, or that of a mix with layers put back to 8 bits, reaches the bar "
              "(%.5f / %.5f vs %.5f: %s)" % (ra["cosine_7bit"], ra["cosine_mixed"], bar, ra["on"]))
    else:
        check(not ra["on"] and ra["cosine_7bit"] == 0, "default on a host whose int8 pairs do not saturate: 8-bit, nothing measured")
    check(written7 == ra["on"], "default: the written weights match the choice (%s)" % ("7-bit" if written7 else "8-bit"))
    # Per layer (the search may leave some at 8 bits): a weight is 7-bit exactly when its node is listed.
    nodes = {"w1": "conv1", "w2": "conv2", "w3": "fc"}
    per_layer = {n: bool(np.all(channel_max(qa[n][0], axes[n]) == 64)) for n in nodes}
    check(all(per_layer[n] == (nodes[n] in ra["layers_7bit"]) for n in nodes) and ra["on"] == any(per_layer.values()),
          "default: the 7-bit weights are those of layers_7bit (%s; %s)" % (per_layer, ra["layers_7bit"]))
    snapped = w("rr_snap.onnx")
    make_model(snapped, snap=True)
    p = ferry("quantize", snapped, "--calibration", w("calib.npz"), "--out", w("snap.onnx"), "--json")
    ra = json.loads(p.stdout)["reduce_range"]
    qs = int8_weights(w("snap.onnx"))
    bits = {n: 7 if np.all(channel_max(qs[n][0], axes[n]) == 64) else 8 if np.all(channel_max(qs[n][0], axes[n]) == 127) else 0
            for n in qs}
    if ra["host_pairs_saturate"]:
        check(ra["on"] and ra["weights_7bit"] == 2 and bits == {"w1": 7, "wd": 8, "w2": 8, "w3": 7} and
              ra["layers_7bit"] == ["conv1", "fc"] and ra["layers_8bit_restored"] == [],
              "default, weights on the 7-bit grid: 7-bit where 8 bits cost the split (%s; cosine 7-bit %.5f, 8-bit %.5f)"
              % (bits, ra["cosine_7bit"], ra["cosine_8bit"]))
    else:
        check(not ra["on"] and set(bits.values()) == {8}, "default, weights on the 7-bit grid: 8-bit on this host")
    # Per layer: 7 bits cost the MatMul almost all of the accuracy and the first Conv none, so the all-7-bit candidate
    # is below the floor and the MatMul alone goes back to 8 bits.
    mixed = w("rr_mixed.onnx")
    make_model(mixed, snap=True, mixed=True)
    p = ferry("quantize", mixed, "--calibration", w("calib.npz"), "--out", w("mixed.onnx"), "--json")
    rep = json.loads(p.stdout)
    ra, plain = rep["reduce_range"], rep["plain_floor"]["plain_cosine"]
    qm = int8_weights(w("mixed.onnx"))
    bits = {n: 7 if np.all(channel_max(qm[n][0], axes[n]) == 64) else 8 if np.all(channel_max(qm[n][0], axes[n]) == 127) else 0
            for n in qm}
    if ra["host_pairs_saturate"]:
        restored = [k["node"] for k in ra["layers_8bit_restored"]]
        check(ra["cosine_7bit"] < ra["cosine_bar"] and restored == ["fc"] and ra["cosine_mixed"] >= ra["cosine_bar"] >= plain,
              "default, 7 bits costly on the MatMul only: all-7-bit below the bar (%.6f < %.6f), the MatMul alone put "
              "back to 8 bits (%s), the mix at the bar (%.6f)" % (ra["cosine_7bit"], ra["cosine_bar"], restored, ra["cosine_mixed"]))
        k = ra["layers_8bit_restored"][0] if restored else {}
        check(k.get("probe_cosine_this_layer_8bit", 0) > k.get("probe_cosine_all_7bit", 1) and
              k.get("model_cosine_after") == ra["cosine_mixed"], "--json: the MatMul's probed gain and the cosine after it")
        check(ra["on"] and ra["weights_7bit"] == 1 and ra["layers_7bit"] == ["conv1"] and
              bits == {"w1": 7, "wd": 8, "w2": 8, "w3": 8} and rep["output_cosine"]["mean"] == ra["cosine_mixed"],
              "default, per layer: the written file 7-bit on conv1 only (%s)" % bits)
    else:
        check(not ra["on"] and set(bits.values()) == {8}, "default, per-layer model: 8-bit on this host")
    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("auto_nf.onnx"), "--no-plain-floor", "--json")
    ra = json.loads(p.stdout)["reduce_range"]
    check(not ra["on"] and ra["cosine_7bit"] == 0, "default with --no-plain-floor: 8-bit (no floor to choose 7-bit by)")

    p = ferry("quantize", model, "--calibration", w("calib.npz"), "--out", w("bad.onnx"), "--reduce-range",
              "--no-reduce-range", expect=2)
    check("--reduce-range" in p.stderr and not os.path.exists(w("bad.onnx")),
          "--reduce-range with --no-reduce-range: exit 2, named, nothing written")
    print("all reduce-range checks passed")


if __name__ == "__main__":
    main()

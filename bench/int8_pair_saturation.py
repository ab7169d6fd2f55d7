#!/usr/bin/python3
"""Where u8 x s8 pairs saturate without VNNI: per Conv of a QDQ file, the weight pairs that can and the
outputs that do on given inputs (the figures behind dnnl_int8_conv.cpp's repair, docs/performance.md "INT8").

    /usr/bin/python3 bench/int8_pair_saturation.py --int8 M.int8.onnx --input NAME=FILE.npy [--ferry build/ferry]

Without VNNI oneDNN multiplies with vpmaddubsw, which adds the products of input channels 2j and 2j + 1
of one tap in int16 with saturation. A weight pair can saturate only where both weights share a sign
and |w0| + |w1| > 128 ("violating pairs", a share of all pairs). Given the layer's actual uint8 input
(every QuantizeLinear output is made a graph output and the file run by `ferry run`), an output is
"touched" where some pair feeding it has a0 * w0 + a1 * w1 outside int16. Per grouped-1 Conv: its
weight shape, its input's zero point, the violating share, the touched share of its outputs.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--int8", required=True)
    ap.add_argument("--input", action="append", required=True, help="NAME=FILE.npy (repeat per input)")
    ap.add_argument("--ferry", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "ferry"))
    a = ap.parse_args()
    m = onnx.load(a.int8)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] not in have:
            m.graph.output.append(helper.make_tensor_value_info(n.output[0], TensorProto.UINT8, None))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "exposed.onnx")
        onnx.save(m, path)
        cmd = [a.ferry, "run", path, "-t", "1", "-o", os.path.join(tmp, "out")]
        for i in a.input:
            cmd += ["-i", i]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"int8_pair_saturation: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
        outs = {f[:-4]: os.path.join(tmp, "out", f) for f in os.listdir(os.path.join(tmp, "out"))}
        print("| Conv | weights | x zero point | violating pairs | touched outputs |")
        print("|---|---|---|---|---|")
        tot_out = tot_touched = 0
        for n in m.graph.node:
            if n.op_type != "Conv":
                continue
            dqx, dqw = prod.get(n.input[0]), prod.get(n.input[1])
            if not dqx or not dqw or dqx.op_type != "DequantizeLinear" or dqw.input[0] not in inits:
                continue
            attrs = {at.name: helper.get_attribute_value(at) for at in n.attribute}
            w = inits[dqw.input[0]].astype(np.int32)
            if attrs.get("group", 1) != 1 or w.ndim != 4:
                continue
            f = outs.get(safe(dqx.input[0]))
            if f is None:
                continue
            x = np.load(f).astype(np.int32)[0]  # C, H, W (raw uint8: what vpmaddubsw multiplies)
            xz = int(inits[dqx.input[2]]) if len(dqx.input) > 2 and dqx.input[2] in inits else 0
            M, C, KH, KW = w.shape
            s = attrs.get("strides", [1, 1])[0]
            pads = attrs.get("pads", [0, 0, 0, 0])
            if C % 2:
                w = np.pad(w, ((0, 0), (0, 1), (0, 0), (0, 0)))
                x = np.pad(x, ((0, 1), (0, 0), (0, 0)))
            w0, w1 = w[:, 0::2], w[:, 1::2]
            viol = ((w0 > 0) & (w1 > 0) & (w0 + w1 > 128)) | ((w0 < 0) & (w1 < 0) & (w0 + w1 < -128))
            xp = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))  # padding: not multiplied (0)
            OH, OW = (xp.shape[1] - KH) // s + 1, (xp.shape[2] - KW) // s + 1
            touched = np.zeros((M, OH, OW), bool)
            for kh in range(KH):
                for kw in range(KW):
                    xs = xp[:, kh:kh + s * OH:s, kw:kw + s * OW:s]
                    a0, a1 = xs[0::2], xs[1::2]
                    jj, hh, ww = np.nonzero(a0 + a1 >= 256)
                    if jj.size == 0:
                        continue
                    v = a0[jj, hh, ww][None] * w0[:, jj, kh, kw] + a1[jj, hh, ww][None] * w1[:, jj, kh, kw]
                    mi, ni = np.nonzero((v > 32767) | (v < -32768))
                    touched[mi, hh[ni], ww[ni]] = True
            tot_out += touched.size
            tot_touched += int(touched.sum())
            print(f"| {n.name} | {list(inits[dqw.input[0]].shape)} | {xz} | {100 * viol.mean():.2f}% | "
                  f"{100 * touched.mean():.4f}% |")
        print(f"\nall these Convs: {tot_touched} of {tot_out} outputs touched ({100 * tot_touched / max(tot_out, 1):.4f}%)")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A small, slow, float64 NumPy interpreter for the ONNX ops in ferry's e2e models.

It is a ferry-independent check that an exported graph computes what PyTorch
computed (onnx 1.12 has no reference evaluator and onnxruntime is not
available), and a stand-in "ferry" to exercise run_case.sh before ferry exists.
Same command line as `ferry run`:

    onnx_numpy_ref.py run MODEL.onnx --input NAME=FILE.npy ... --output-dir DIR

writes DIR/<output name>.npy (characters outside [A-Za-z0-9._-] -> '_').
Floating-point tensors are computed in float64 and written as float32.
Supported ops: those listed in OPS below (default domain only).
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    import math
    _erf = np.vectorize(math.erf, otypes=[np.float64])

F64 = np.float64
ONNX_TO_NP = {
    onnx.TensorProto.FLOAT: F64, onnx.TensorProto.DOUBLE: F64, onnx.TensorProto.FLOAT16: F64,
    onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.BOOL: np.bool_,
}


def widen(a):
    a = np.asarray(a)
    return a.astype(F64) if a.dtype.kind == "f" else a


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv(x, w, b=None, group=1, strides=None, pads=None, dilations=None, auto_pad=b"NOTSET", **_):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    if auto_pad not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError("Conv auto_pad")
    pt, pl, pb, pr = pads or (0, 0, 0, 0)
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (ekh, ekw), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # [N, C, OH, OW, kh, kw]
    oh, ow = win.shape[2], win.shape[3]
    if group == 1:
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
        y = (cols @ w.reshape(m, -1).T).reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
    elif cg == 1 and m == group:  # depthwise
        y = np.einsum("nchwij,cij->nchw", win, w[:, 0], optimize=True)
    else:
        win = win.reshape(n, group, cg, oh, ow, kh, kw)
        wg = w.reshape(group, m // group, cg, kh, kw)
        y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(y)


def maxpool(x, kernel_shape, strides=None, pads=None, ceil_mode=0, dilations=None, **_):
    kh, kw = kernel_shape
    sh, sw = strides or (1, 1)
    if dilations and tuple(dilations) != (1, 1):
        raise NotImplementedError("MaxPool dilations")
    pt, pl, pb, pr = pads or (0, 0, 0, 0)
    h, w = x.shape[2] + pt + pb, x.shape[3] + pl + pr
    rnd = np.ceil if ceil_mode else np.floor
    oh, ow = int(rnd((h - kh) / sh)) + 1, int(rnd((w - kw) / sw)) + 1
    eb, er = max(0, (oh - 1) * sh + kh - h), max(0, (ow - 1) * sw + kw - w)
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win[:, :, :oh, :ow].max(axis=(4, 5))


def softmax(x, axis=-1, **_):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def reshape(x, shape, allowzero=0, **_):
    shape = [int(s) for s in shape]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def slice_(x, starts, ends, axes=None, steps=None, **_):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[int(a)] = slice(int(s), int(e), int(st))
    return x[tuple(idx)]


def gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0, **_):
    a = a.T if transA else a
    b = b.T if transB else b
    y = alpha * (a @ b)
    return y + beta * c if c is not None else y


def layernorm(x, scale, b=None, axis=-1, epsilon=1e-5, **_):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + epsilon) * scale
    return y + b if b is not None else y


def constant(**a):
    if "value" in a:
        return widen(numpy_helper.to_array(a["value"]))
    if "value_float" in a:
        return np.array(a["value_float"], F64)
    if "value_floats" in a:
        return np.array(a["value_floats"], F64)
    if "value_int" in a:
        return np.array(a["value_int"], np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], np.int64)
    raise NotImplementedError(f"Constant {list(a)}")


def constant_of_shape(shape, value=None, **_):
    v = widen(numpy_helper.to_array(value)) if value is not None else np.zeros(1, F64)
    return np.full([int(s) for s in shape], v.reshape(-1)[0], dtype=v.dtype)


def reduce_mean(x, axes=None, keepdims=1, **_):
    return x.mean(axis=tuple(axes) if axes is not None else None, keepdims=bool(keepdims))


def shape_(x, start=0, end=None, **_):
    return np.array(x.shape[start:end], np.int64)


def clip(x, lo=None, hi=None, **a):
    lo = a.get("min", lo) if lo is None else lo
    hi = a.get("max", hi) if hi is None else hi
    return np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rnn_check(kind, a, sequence_lens):
    if sequence_lens is not None:
        raise NotImplementedError(f"{kind} sequence_lens")
    acts = a.get("activations")
    if acts and [v.decode() if isinstance(v, bytes) else v for v in acts] not in (
            ["Sigmoid", "Tanh", "Tanh"] * 2, ["Sigmoid", "Tanh", "Tanh"], ["Sigmoid", "Tanh"] * 2, ["Sigmoid", "Tanh"]):
        raise NotImplementedError(f"{kind} activations {acts}")
    if a.get("clip") is not None or a.get("layout", 0) != 0:
        raise NotImplementedError(f"{kind} clip/layout")
    d = a.get("direction", b"forward")
    d = d.decode() if isinstance(d, bytes) else d
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[d]


def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, **a):
    """ONNX LSTM (layout 0, default activations, gates i o f c)."""
    reverse = _rnn_check("LSTM", a, sequence_lens)
    if p is not None or a.get("input_forget", 0):
        raise NotImplementedError("LSTM peepholes / input_forget")
    seq, batch, _ = x.shape
    hid = a["hidden_size"]
    y = np.zeros((seq, len(reverse), batch, hid))
    yh = np.zeros((len(reverse), batch, hid))
    yc = np.zeros((len(reverse), batch, hid))
    for d, rev in enumerate(reverse):
        h = initial_h[d] if initial_h is not None else np.zeros((batch, hid))
        c = initial_c[d] if initial_c is not None else np.zeros((batch, hid))
        bias = b[d, :4 * hid] + b[d, 4 * hid:] if b is not None else np.zeros(4 * hid)
        for t in (range(seq - 1, -1, -1) if rev else range(seq)):
            g = x[t] @ w[d].T + h @ r[d].T + bias
            i, o, f, cc = (g[:, k * hid:(k + 1) * hid] for k in range(4))
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
            h = _sigmoid(o) * np.tanh(c)
            y[t, d] = h
        yh[d], yc[d] = h, c
    return y, yh, yc


def gru(x, w, r, b=None, sequence_lens=None, initial_h=None, **a):
    """ONNX GRU (layout 0, default activations, gates z r h)."""
    reverse = _rnn_check("GRU", a, sequence_lens)
    seq, batch, _ = x.shape
    hid = a["hidden_size"]
    lbr = a.get("linear_before_reset", 0)
    y = np.zeros((seq, len(reverse), batch, hid))
    yh = np.zeros((len(reverse), batch, hid))
    for d, rev in enumerate(reverse):
        h = initial_h[d] if initial_h is not None else np.zeros((batch, hid))
        wb = b[d, :3 * hid] if b is not None else np.zeros(3 * hid)
        rb = b[d, 3 * hid:] if b is not None else np.zeros(3 * hid)
        for t in (range(seq - 1, -1, -1) if rev else range(seq)):
            gx = x[t] @ w[d].T + wb
            z = _sigmoid(gx[:, :hid] + h @ r[d, :hid].T + rb[:hid])
            rr = _sigmoid(gx[:, hid:2 * hid] + h @ r[d, hid:2 * hid].T + rb[hid:2 * hid])
            if lbr:
                hh = np.tanh(gx[:, 2 * hid:] + rr * (h @ r[d, 2 * hid:].T + rb[2 * hid:]))
            else:
                hh = np.tanh(gx[:, 2 * hid:] + (rr * h) @ r[d, 2 * hid:].T + rb[2 * hid:])
            h = (1 - z) * hh + z * h
            y[t, d] = h
        yh[d] = h
    return y, yh


def _axes(x, axes, extra_rank=0):
    return sorted(int(v) % (x.ndim + extra_rank) for v in np.atleast_1d(axes))


def unsqueeze(x, axes_in=None, axes=None, **_):
    ax = _axes(x, axes_in if axes_in is not None else axes, len(np.atleast_1d(
        axes_in if axes_in is not None else axes)))
    for v in ax:
        x = np.expand_dims(x, v)
    return x


def squeeze(x, axes_in=None, axes=None, **_):
    ax = axes_in if axes_in is not None else axes
    return np.squeeze(x, axis=None if ax is None else tuple(_axes(x, ax)))


OPS = {
    "LSTM": lstm,
    "GRU": gru,
    "Unsqueeze": unsqueeze,
    "Squeeze": squeeze,
    "Concat": lambda *xs, axis, **_: np.concatenate(xs, axis=axis),
    "Sigmoid": _sigmoid,
    "Tanh": lambda x, **_: np.tanh(x),
    "Add": lambda a, b, **_: a + b,
    "Sub": lambda a, b, **_: a - b,
    "Mul": lambda a, b, **_: a * b,
    "Div": lambda a, b, **_: (a // b if a.dtype.kind in "iu" else a / b),
    "Pow": lambda a, b, **_: np.power(a, b),
    "Sqrt": lambda x, **_: np.sqrt(x),
    "Erf": lambda x, **_: _erf(x),
    "Relu": lambda x, **_: np.maximum(x, 0),
    "Clip": clip,
    "Equal": lambda a, b, **_: np.equal(a, b),
    "Where": lambda c, a, b, **_: np.where(c, a, b),
    "Cast": lambda x, to, **_: x.astype(ONNX_TO_NP[to]),
    "Identity": lambda x, **_: x,
    "Constant": lambda **a: constant(**a),
    "ConstantOfShape": constant_of_shape,
    "Shape": shape_,
    "Reshape": reshape,
    "Flatten": lambda x, axis=1, **_: x.reshape(int(np.prod(x.shape[:axis])), -1),
    "Transpose": lambda x, perm=None, **_: np.transpose(x, perm),
    "Expand": lambda x, s, **_: np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(v) for v in s))).copy(),
    "Slice": slice_,
    "Gather": lambda x, i, axis=0, **_: np.take(x, i, axis=axis),
    "MatMul": lambda a, b, **_: np.matmul(a, b),
    "Gemm": gemm,
    "Softmax": softmax,
    "ReduceMean": reduce_mean,
    "LayerNormalization": layernorm,
    "Conv": conv,
    "MaxPool": maxpool,
    "GlobalAveragePool": lambda x, **_: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),
}


def run_model(model_path, feeds):
    m = onnx.load(model_path)
    env = {i.name: widen(numpy_helper.to_array(i)) for i in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in env and vi.name not in feeds:
            continue
        if vi.name not in feeds:
            raise KeyError(f"missing input {vi.name}")
        env[vi.name] = widen(feeds[vi.name])
    for node in m.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            raise NotImplementedError(f"op {node.domain}:{node.op_type} ({node.name})")
        args = [env[i] if i else None for i in node.input]
        while args and args[-1] is None:
            args.pop()
        out = OPS[node.op_type](*args, **attrs(node))
        outs = out if isinstance(out, tuple) else (out,)
        for name, val in zip(node.output, outs):
            env[name] = np.asarray(val)
    return [(o.name, env[o.name]) for o in m.graph.output]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["run"])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--output-dir", required=True)
    args = ap.parse_args()
    feeds = {}
    for spec in args.input:
        name, _, path = spec.partition("=")
        feeds[name] = np.load(path, allow_pickle=False)
    t0 = time.time()
    outs = run_model(args.model, feeds)
    os.makedirs(args.output_dir, exist_ok=True)
    for name, val in outs:
        if val.dtype == F64:
            val = val.astype(np.float32)
        np.save(os.path.join(args.output_dir, re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"), val)
    print(f"onnx_numpy_ref: {len(outs)} output(s) in {time.time() - t0:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

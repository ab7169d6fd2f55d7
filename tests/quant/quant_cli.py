"""Shared by the tests/quant checks: run the ferry CLI, check a condition, name a work file.

    import quant_cli
    from quant_cli import check, ferry, w
    quant_cli.setup(sys.argv[1], sys.argv[2])   # FERRY, WORKDIR

plus the helpers of the checks that compare a quantized file with its float model on one input
`x` and one output `y`: `outputs`, `mean_cosine`, `structure`.
"""
import os
import subprocess
import sys

FERRY = None
WORK = None


def setup(ferry_bin, work):
    global FERRY, WORK
    FERRY, WORK = ferry_bin, work
    os.makedirs(WORK, exist_ok=True)


def ferry(*args, expect=0):
    """Runs `ferry ARGS`; fails the check unless it exits `expect` (None: any exit)."""
    cmd = [FERRY] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if expect is not None and p.returncode != expect:
        sys.exit("FAIL: %s\nexit %d (expected %d)\nstdout:\n%s\nstderr:\n%s" %
                 (" ".join(cmd), p.returncode, expect, p.stdout[-4000:], p.stderr[-4000:]))
    return p


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def w(name):
    return os.path.join(WORK, name)


def outputs(model, inp, tag):
    """`ferry run MODEL --input x=INP`: the output y as an array (written under WORK/out_TAG)."""
    import numpy as np
    out = w("out_" + tag)
    ferry("run", model, "--input", "x=" + inp, "--output-dir", out)
    return np.load(os.path.join(out, "y.npy"))


def mean_cosine(a, b):
    """The cosine of each sample's output (first axis) to the reference's, averaged."""
    import numpy as np
    a, b = a.reshape(a.shape[0], -1).astype(np.float64), b.reshape(b.shape[0], -1).astype(np.float64)
    return float(np.mean(np.sum(a * b, 1) / np.sqrt(np.sum(a * a, 1) * np.sum(b * b, 1))))


def structure(path):
    """A model file's nodes (op, inputs, outputs), initializers (dtype, shape) and their values."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    nodes = [(n.op_type, tuple(n.input), tuple(n.output)) for n in m.graph.node]
    inits = {t.name: (t.data_type, tuple(t.dims)) for t in m.graph.initializer}
    return nodes, inits, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

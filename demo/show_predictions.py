#!/usr/bin/python3
"""Show ferry's predictions for the demo digits next to the true labels.

usage: show_predictions.py LOGITS_NPY LABELS_TXT

LOGITS_NPY  .npy of float logits, shape [N,10] (any shape with N*10 elements
            whose last axis is 10 is accepted, e.g. [N,1,10] or a single [10]).
LABELS_TXT  true labels, one integer per line (blank lines ignored).

Prints: index, predicted class, true class, softmax confidence of the
prediction, OK/MISS; then "accuracy: k/N". If the two files disagree on N,
a warning is printed and only the first min(N_logits, N_labels) rows are scored.

Exit status: 0 after printing the table (whatever the accuracy); 2 when a file
cannot be read or does not hold logits/labels, or on bad usage.
Needs only numpy (Debian's /usr/bin/python3 has it).
"""

import sys

import numpy as np


def fail(msg):
    print(f"show_predictions: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_logits(path):
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            fail(f"'{path}' is not a .npy file (no NumPy header)")
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        fail(f"cannot read logits file '{path}': {e}")
    if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.number):
        fail(f"'{path}' does not hold a numeric array (dtype {getattr(a, 'dtype', '?')})")
    if a.ndim == 0 or a.size == 0 or a.shape[-1] != 10:
        fail(f"'{path}' has shape {list(a.shape)}; expected [N,10] logits")
    return a.reshape(-1, 10).astype(np.float64)


def load_labels(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = [ln.strip() for ln in f]
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read labels file '{path}': {e}")
    labels = []
    for n, ln in enumerate(lines, 1):
        if not ln:
            continue
        try:
            labels.append(int(ln))
        except ValueError:
            fail(f"'{path}' line {n}: '{ln}' is not an integer label")
    if not labels:
        fail(f"'{path}' holds no labels")
    return labels


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 0 if len(argv) == 2 else 2
    logits = load_logits(argv[1])
    labels = load_labels(argv[2])

    n = min(len(logits), len(labels))
    if len(logits) != len(labels):
        print(f"warning: {len(logits)} logit rows but {len(labels)} labels; "
              f"scoring the first {n}", file=sys.stderr)

    z = logits[:n] - logits[:n].max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    pred = p.argmax(axis=1)

    print(f"{'idx':>3}  {'pred':>4}  {'true':>4}  {'conf':>7}  result")
    ok = 0
    for i in range(n):
        hit = int(pred[i]) == labels[i]
        ok += hit
        print(f"{i:>3}  {int(pred[i]):>4}  {labels[i]:>4}  {p[i, pred[i]]:>7.4f}  "
              f"{'OK' if hit else 'MISS'}")
    print(f"accuracy: {ok}/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

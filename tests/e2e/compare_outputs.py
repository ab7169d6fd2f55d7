#!/usr/bin/env python3
"""Compare ferry's outputs with the PyTorch reference outputs of one e2e case.

    compare_outputs.py --expected DIR/<case> --actual ACTUAL_DIR --outputs NAME,NAME...

Output k (k-th name in --outputs) is expected in DIR/<case>/expected_<k>.npy and
in ACTUAL_DIR/<name>.npy, where characters of the name outside [A-Za-z0-9._-]
are replaced by '_' (ferry's file naming).  Without --outputs the names are
read from DIR/<case>/meta.json.

Per output it checks
    * same shape (and dtype kind: float vs int vs bool),
    * max_abs_err <= rtol_range * (max(expected) - min(expected))
      (if that range is 0: max_abs_err <= atol_zero_range),
    * cosine similarity (float64) >= min_cosine  (skipped when both are all-zero;
      for integer/bool outputs the values must match exactly instead).
Exit status: 0 all PASS, 1 any FAIL, 2 missing/unreadable files or bad arguments.
"""
import argparse
import json
import os
import re
import sys

import numpy as np


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def compare(name, exp, act, rtol_range, atol_zero, min_cos):
    """Returns (ok, report line)."""
    head = f"{name}: shape {list(exp.shape)}"
    if exp.shape != act.shape:
        return False, f"{head} FAIL: actual shape {list(act.shape)} != expected {list(exp.shape)}"
    exact = exp.dtype.kind in "biu" or act.dtype.kind in "biu"
    if exact:
        if exp.dtype.kind != act.dtype.kind:
            return False, f"{head} FAIL: dtype {act.dtype} != expected {exp.dtype}"
        mism = int(np.count_nonzero(exp != act))
        ok = mism == 0
        return ok, f"{head} dtype {exp.dtype} mismatches {mism} {'PASS' if ok else 'FAIL'}"
    e = exp.astype(np.float64)
    a = act.astype(np.float64)
    if e.size == 0:
        return True, f"{head} (empty) PASS"
    bad = ~np.isfinite(a) & np.isfinite(e)
    nonfinite_mismatch = int(np.count_nonzero(bad | (np.isnan(a) != np.isnan(e)) |
                                              (np.isinf(e) & (a != e))))
    fin = np.isfinite(e) & np.isfinite(a)
    diff = np.abs(e[fin] - a[fin])
    max_err = float(diff.max()) if diff.size else 0.0
    ef = e[np.isfinite(e)]
    rng = float(ef.max() - ef.min()) if ef.size else 0.0
    tol = rtol_range * rng if rng > 0 else atol_zero
    ratio = max_err / tol
    ev, av = e[fin].ravel(), a[fin].ravel()
    ne, na = np.linalg.norm(ev), np.linalg.norm(av)
    if ne == 0 and na == 0:
        cos = 1.0
    elif ne == 0 or na == 0:
        cos = 0.0
    else:
        cos = float(np.dot(ev, av) / (ne * na))
    ok = nonfinite_mismatch == 0 and max_err <= tol and cos >= min_cos
    reasons = []
    if nonfinite_mismatch:
        reasons.append(f"{nonfinite_mismatch} non-finite mismatches")
    if max_err > tol:
        i = np.unravel_index(np.argmax(np.where(fin, np.abs(e - a), -1)), e.shape)
        reasons.append(f"worst at {list(map(int, i))}: expected {e[i]:.7g} actual {a[i]:.7g}")
    if cos < min_cos:
        reasons.append(f"cosine < {min_cos}")
    line = (f"{head} max_abs_err {max_err:.3e} range {rng:.4g} tol {tol:.3e} "
            f"ratio {ratio:.3f} cosine {cos:.9f} {'PASS' if ok else 'FAIL'}")
    if reasons:
        line += " (" + "; ".join(reasons) + ")"
    return ok, line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--expected", required=True, help="case directory with expected_<k>.npy")
    ap.add_argument("--actual", required=True, help="directory with <output name>.npy")
    ap.add_argument("--outputs", default="", help="comma-separated output names in model order "
                    "(default: from meta.json)")
    ap.add_argument("--rtol-range", type=float, default=1e-4,
                    help="max abs error allowed, as a fraction of the expected output's range")
    ap.add_argument("--atol-zero-range", type=float, default=1e-6,
                    help="absolute tolerance when the expected output is constant")
    ap.add_argument("--min-cosine", type=float, default=0.99999)
    args = ap.parse_args()

    names = [n for n in args.outputs.split(",") if n] if args.outputs else None
    if names is None:
        try:
            with open(os.path.join(args.expected, "meta.json")) as f:
                names = json.load(f)["outputs"]
        except (OSError, ValueError, KeyError) as e:
            print(f"error: no --outputs and cannot read meta.json: {e}", file=sys.stderr)
            return 2
    if not names:
        print("error: no outputs to compare", file=sys.stderr)
        return 2

    missing = False
    failed = False
    for k, name in enumerate(names):
        ep = os.path.join(args.expected, f"expected_{k}.npy")
        ap_ = os.path.join(args.actual, sanitize(name) + ".npy")
        arrs = []
        for p in (ep, ap_):
            try:
                arrs.append(np.load(p, allow_pickle=False))
            except (OSError, ValueError) as e:
                print(f"{name}: MISSING {p} ({e.__class__.__name__}: {e})")
                missing = True
                break
        if len(arrs) != 2:
            continue
        ok, line = compare(name, arrs[0], arrs[1], args.rtol_range, args.atol_zero_range, args.min_cosine)
        print(line)
        failed |= not ok
    extra = os.path.join(args.expected, f"expected_{len(names)}.npy")
    if os.path.exists(extra):
        print(f"warning: {extra} exists but only {len(names)} output name(s) were given")
    if missing:
        print("RESULT: MISSING FILES")
        return 2
    print("RESULT: " + ("FAIL" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

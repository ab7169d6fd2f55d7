#!/usr/bin/env python3
"""Fidelity check: run ferry on every zoo case and compare with PyTorch, in float64.

    fidelity.py FERRY ZOO_DIR [--write-doc docs/fidelity.md] [--device DEV] [--timeout S] [--json FILE] [CASE...]

(tests/zoo/run_fidelity.sh wraps this.)  For each case folder ZOO_DIR/<case> made by
gen_zoo.py (all complete cases when no CASE is given, in generation order) it runs

    FERRY run ZOO_DIR/<case>/model.onnx --input NAME=input_<i>.npy ... --output-dir TMP [--device DEV]

and checks every output k against expected_<k>.npy:
    float outputs:        same shape, no NaN/Inf where the reference is finite,
                          cosine similarity >= 1 - 1e-9, and
                          max|ferry - ref| <= 1e-4 * max|ref|          (all in float64)
    integer/bool outputs: same shape and dtype kind, all values equal.
It prints one row per case (for several outputs: the worst output, then one
line per output) and exits 1 if any case FAILs, 2 on bad arguments or a missing
zoo.  --write-doc writes a Markdown report (table, command, date, criteria).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

MIN_COSINE = 1.0 - 1e-9
REL_TOL = 1e-4


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def load_meta(case_dir):
    with open(os.path.join(case_dir, "meta.json")) as f:
        return json.load(f)


def compare(exp, act):
    """Returns a dict: ok, cosine, max_abs, rel, max_ref, note."""
    r = dict(ok=False, cosine=float("nan"), max_abs=float("nan"), rel=float("nan"),
             max_ref=float("nan"), note="", exact=False)
    if exp.shape != act.shape:
        r["note"] = f"shape {list(act.shape)} != expected {list(exp.shape)}"
        return r
    if exp.dtype.kind in "biu" or act.dtype.kind in "biu":
        r["exact"] = True
        if exp.dtype.kind != act.dtype.kind:
            r["note"] = f"dtype {act.dtype} != expected {exp.dtype}"
            return r
        mism = int(np.count_nonzero(exp != act))
        r.update(ok=mism == 0, max_abs=float(np.abs(exp.astype(np.float64) - act.astype(np.float64)).max())
                 if exp.size else 0.0, cosine=1.0 if mism == 0 else 0.0, rel=0.0 if mism == 0 else 1.0)
        if mism:
            r["note"] = f"{mism} of {exp.size} values differ"
        return r
    e = exp.astype(np.float64).ravel()
    a = act.astype(np.float64).ravel()
    if e.size == 0:
        r.update(ok=True, cosine=1.0, max_abs=0.0, rel=0.0, max_ref=0.0)
        return r
    ef, af = np.isfinite(e), np.isfinite(a)
    nonfinite = int(np.count_nonzero((ef & ~af) | (np.isnan(e) != np.isnan(a)) | (np.isinf(e) & (a != e))))
    fin = ef & af
    diff = np.abs(e[fin] - a[fin])
    max_abs = float(diff.max()) if diff.size else 0.0
    max_ref = float(np.abs(e[ef]).max()) if ef.any() else 0.0
    ne, na = np.linalg.norm(e[fin]), np.linalg.norm(a[fin])
    if ne == 0 and na == 0:
        cos = 1.0
    elif ne == 0 or na == 0:
        cos = 0.0
    else:
        cos = float(np.dot(e[fin], a[fin]) / (ne * na))
    rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else float("inf"))
    ok = nonfinite == 0 and cos >= MIN_COSINE and max_abs <= REL_TOL * max_ref
    notes = []
    if nonfinite:
        notes.append(f"{nonfinite} NaN/Inf mismatches")
    if max_abs > REL_TOL * max_ref:
        i = int(np.argmax(np.where(fin, np.abs(e - a), -1.0)))
        idx = list(map(int, np.unravel_index(i, exp.shape)))
        notes.append(f"worst at {idx}: ref {e[i]:.7g} ferry {a[i]:.7g}")
    if cos < MIN_COSINE:
        notes.append(f"cosine {cos:.12f} < 1-1e-9")
    r.update(ok=ok, cosine=cos, max_abs=max_abs, rel=rel, max_ref=max_ref, note="; ".join(notes))
    return r


def first_error_line(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[-1] if lines else ""


def run_case(ferry, zoo, case, timeout, device=None):
    d = os.path.join(zoo, case)
    meta = load_meta(d)
    res = dict(case=case, model=meta.get("model", case), opset=meta.get("opset"),
               batch=meta.get("batch"), status="FAIL", outputs=[], error="", wall=float("nan"),
               exit_code=None, tags=meta.get("tags", []))
    tmp = tempfile.mkdtemp(prefix=f"ferry_zoo_{case}.")
    try:
        # Two runs: the second uses the memory plan (arena, in-place buffers) the first recorded,
        # and ferry checks it reproduces the first bit for bit.
        cmd = [ferry, "run", os.path.join(d, "model.onnx"), "--runs", "2"]
        for name, f in zip(meta["inputs"], meta["input_files"]):
            cmd += ["--input", f"{name}={os.path.join(d, f)}"]
        cmd += ["--output-dir", tmp]
        if device:
            cmd += ["--device", device]
        res["command"] = " ".join(shlex.quote(c) for c in cmd)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            res["wall"] = time.perf_counter() - t0
            res["error"] = f"ferry timed out after {timeout}s"
            return res
        res["wall"] = time.perf_counter() - t0
        res["exit_code"] = p.returncode
        if p.returncode != 0:
            res["error"] = f"ferry exit {p.returncode}: {first_error_line(p.stderr + p.stdout)}"
            res["stderr"] = p.stderr[-4000:]
            return res
        all_ok = True
        for k, name in enumerate(meta["outputs"]):
            exp = np.load(os.path.join(d, f"expected_{k}.npy"), allow_pickle=False)
            path = os.path.join(tmp, sanitize(name) + ".npy")
            if not os.path.isfile(path):
                res["outputs"].append(dict(name=name, ok=False, note=f"ferry wrote no {sanitize(name)}.npy",
                                           cosine=float("nan"), max_abs=float("nan"), rel=float("nan"),
                                           exact=False))
                all_ok = False
                continue
            r = compare(exp, np.load(path, allow_pickle=False))
            r["name"] = name
            res["outputs"].append(r)
            all_ok &= r["ok"]
        res["status"] = "PASS" if all_ok else "FAIL"
        if not all_ok:
            res["error"] = "; ".join(f"{o['name']}: {o['note']}" for o in res["outputs"] if not o["ok"])
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def worst(res):
    """The output that sets the row's figures: the first failing one, else the
    one with the largest relative error."""
    outs = res["outputs"]
    if not outs:
        return None
    bad = [o for o in outs if not o["ok"]]
    if bad:
        return bad[0]
    return max(outs, key=lambda o: (o["rel"] if o["rel"] == o["rel"] else float("inf")))


def fmt_num(x, spec):
    if x is None or x != x:
        return "-"
    return format(x, spec)


def fmt_cos(o):
    if o is None:
        return "-"
    if o.get("exact"):
        return "exact" if o["ok"] else "mismatch"
    c = o["cosine"]
    if c != c:
        return "-"
    # 1 - cosine is the informative figure near 1
    return f"1-{max(0.0, 1.0 - c):.1e}" if c > 0.999 else f"{c:.6f}"


HEADER = ["case", "model", "opset", "batch", "cosine", "max abs err", "rel err", "ferry wall", "result"]


def row(res, o=None, sub=False):
    o = o if o is not None else worst(res)
    return [("  " + o["name"]) if sub else res["case"],
            "" if sub else res["model"],
            "" if sub else str(res["opset"]),
            "" if sub else str(res["batch"]),
            fmt_cos(o),
            fmt_num(o["max_abs"] if o else None, ".3e"),
            fmt_num(o["rel"] if o else None, ".2e"),
            "" if sub else (fmt_num(res["wall"], ".2f") + "s"),
            ("PASS" if o["ok"] else "FAIL") if sub else res["status"]]


def print_table(rows):
    widths = [max(len(r[i]) for r in [HEADER] + rows) for i in range(len(HEADER))]
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), flush=True)


def discover(zoo):
    cases = []
    for name in os.listdir(zoo):
        d = os.path.join(zoo, name)
        if os.path.isfile(os.path.join(d, "meta.json")) and os.path.isfile(os.path.join(d, "model.onnx")):
            try:
                m = load_meta(d)
            except (OSError, ValueError):
                continue
            cases.append((m.get("index", 1 << 30), m.get("subindex", 0), name))
    return [c for _, _, c in sorted(cases)]


def ferry_version(ferry):
    try:
        p = subprocess.run([ferry, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=30)
        v = p.stdout.strip().splitlines()
        return v[0] if p.returncode == 0 and v else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def write_doc(path, results, command, zoo, ferry, total_wall, device):
    metas = {}
    for r in results:
        try:
            metas[r["case"]] = load_meta(os.path.join(zoo, r["case"]))
        except (OSError, ValueError):
            pass
    any_meta = next(iter(metas.values()), {})
    npass = sum(r["status"] == "PASS" for r in results)
    now = datetime.datetime.now().astimezone()
    L = []
    L.append("# Fidelity: ferry vs PyTorch on the model zoo")
    L.append("")
    L.append("<!-- Generated by tests/zoo/run_fidelity.sh; do not edit by hand. -->")
    L.append("")
    L.append(f"Generated {now.strftime('%Y-%m-%d %H:%M %Z')} on {platform.machine()} "
             f"({os.cpu_count()} CPUs, shared), ferry `{ferry}`"
             + (f" ({ferry_version(ferry)})" if ferry_version(ferry) else "")
             + f", references from torch {any_meta.get('torch_version', '?')} / "
             f"onnx {any_meta.get('onnx_version', '?')}.")
    L.append("")
    L.append(f"**{npass} of {len(results)} cases pass.** Total ferry time {total_wall:.0f}s.")
    L.append("")
    L.append("Reproduce:")
    L.append("")
    L.append("```sh")
    L.append(f"/usr/bin/python3 tests/zoo/gen_zoo.py --out {zoo}   # incremental; see tests/zoo/README.md")
    L.append(command)
    L.append("```")
    L.append("")
    L.append("Criteria, per output, computed in float64 against PyTorch's output (fp32):")
    L.append("")
    L.append("- float outputs: cosine similarity >= 1 - 1e-9, and max|ferry - ref| <= 1e-4 * max|ref|"
             " (*rel err* = max abs err / max|ref|, so the bound is rel err <= 1e-4);"
             " NaN/Inf must match the reference;")
    L.append("- integer / bool outputs: exactly equal;")
    L.append("- shapes must match. A case passes when every output passes; for a case with several"
             " outputs the row shows the worst output and the lines below it show each one.")
    L.append("")
    L.append("*cosine* is written as 1 - (1 - cosine). *ferry wall* is the wall time of one `ferry run`"
             f" process (load, run, write outputs) on device `{device or 'cpu'}`"
             f"{'' if device else ' (the default)'}, on a shared machine.")
    L.append("")
    L.append("| " + " | ".join(HEADER) + " |")
    L.append("|" + "|".join("---" for _ in HEADER) + "|")
    for r in results:
        L.append("| " + " | ".join(c if c else " " for c in row(r)) + " |")
        if len(r["outputs"]) > 1:
            for o in r["outputs"]:
                L.append("| " + " | ".join(c if c else " " for c in row(r, o, sub=True)) + " |")
    fails = [r for r in results if r["status"] != "PASS"]
    if fails:
        L.append("")
        L.append("## Failures")
        L.append("")
        for r in fails:
            L.append(f"- **{r['case']}**: {r['error'] or 'see above'}")
    L.append("")
    L.append("## Cases")
    L.append("")
    L.append("| case | inputs | outputs | ONNX ops |")
    L.append("|---|---|---|---|")
    for r in results:
        m = metas.get(r["case"], {})
        ins = ", ".join(f"{n} {dt}{s}" for n, dt, s in zip(m.get("inputs", []), m.get("input_dtypes", []),
                                                          m.get("input_shapes", [])))
        outs = ", ".join(f"{n} {s}" for n, s in zip(m.get("outputs", []), m.get("output_shapes", [])))
        ops = ", ".join(f"{k} {v}" for k, v in m.get("op_histogram", {}).items())
        L.append(f"| {r['case']} | {ins} | {outs} | {ops} |")
    L.append("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(L))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ferry")
    ap.add_argument("zoo")
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--write-doc", metavar="PATH")
    ap.add_argument("--device", help="passed to `ferry run --device` (default: ferry's default, cpu)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per ferry run (default 900)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--command", help=argparse.SUPPRESS)  # the command line to quote in the doc
    args = ap.parse_args()

    if not (os.path.isfile(args.ferry) and os.access(args.ferry, os.X_OK)):
        print(f"fidelity: ferry binary '{args.ferry}' not found or not executable", file=sys.stderr)
        return 2
    if not os.path.isdir(args.zoo):
        print(f"fidelity: zoo folder '{args.zoo}' does not exist; run tests/zoo/gen_zoo.py --out {args.zoo}",
              file=sys.stderr)
        return 2
    cases = args.cases or discover(args.zoo)
    missing = [c for c in cases if not os.path.isfile(os.path.join(args.zoo, c, "meta.json"))]
    if missing:
        print(f"fidelity: not generated in {args.zoo}: {', '.join(missing)} "
              f"(run tests/zoo/gen_zoo.py --out {args.zoo})", file=sys.stderr)
        return 2
    if not cases:
        print(f"fidelity: no cases in {args.zoo}", file=sys.stderr)
        return 2

    results = []
    t0 = time.time()
    widths_printed = False
    for c in cases:
        r = run_case(args.ferry, args.zoo, c, args.timeout, args.device)
        results.append(r)
        rows = [row(r)]
        if len(r["outputs"]) > 1:
            rows += [row(r, o, sub=True) for o in r["outputs"]]
        if not widths_printed:
            print("  ".join(HEADER))
            widths_printed = True
        for rr in rows:
            print("  ".join(rr), flush=True)
        if r["status"] != "PASS":
            print(f"    {r['case']}: {r['error']}", flush=True)
            extra = [ln for ln in (r.get("stderr") or "").splitlines() if ln.strip()]
            if args.cases and (len(extra) > 1 or (extra and extra[0].strip() not in r["error"])):
                print("    ferry stderr:\n" + "\n".join("      " + ln for ln in r["stderr"].splitlines()[-20:]))
    total = time.time() - t0
    npass = sum(r["status"] == "PASS" for r in results)
    print()
    allrows = []
    for r in results:
        allrows.append(row(r))
    print_table(allrows)
    print(f"\n{npass}/{len(results)} PASS, {len(results) - npass} FAIL; ferry total {total:.1f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if args.write_doc:
        command = args.command or " ".join(shlex.quote(a) for a in sys.argv)
        write_doc(args.write_doc, results, command, args.zoo, args.ferry, total, args.device)
        print(f"wrote {args.write_doc}")
    return 0 if npass == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""`ferry check` over the model zoo against every shipped target (static analysis: seconds).

    check_zoo.py FERRY ZOO_DIR [--markdown OUT.md]

For each model.onnx under ZOO_DIR (hard-linked duplicates once): the report is valid JSON, the
exit code says whether every target passed, ferry's CPU backends pass (the zoo runs on them),
every finding names a reason and every failure a fix. Prints the summary table (models x targets:
pass / FAIL n / decomposed n); --markdown also writes it as a Markdown table.
"""
import argparse
import json
import os
import subprocess
import sys

TARGETS = ["cpu", "cpu-ref", "tensorrt-10.1", "ascend-atc-2025", "ascend-atc-2022", "openvino"]


def models(zoo):
    seen, out = set(), []
    for case in sorted(os.listdir(zoo)):
        path = os.path.join(zoo, case, "model.onnx")
        if not os.path.isfile(path):
            continue
        key = (os.stat(path).st_dev, os.stat(path).st_ino)
        if key in seen:
            continue
        seen.add(key)
        out.append((case, path))
    return out


def cell(t):
    if t["passed"]:
        return "pass" + (f" ({t['decomposed']} decomposed)" if t["decomposed"] else "")
    return f"FAIL {t['fails']}/{t['nodes']}" + (f" ({t['decomposed']} decomposed)" if t["decomposed"] else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("zoo")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    found = models(args.zoo)
    if not found:
        sys.exit(f"no model.onnx under {args.zoo}: generate the zoo first (tests/zoo/gen_zoo.py)")
    problems, rows = [], []
    for case, path in found:
        r = subprocess.run([args.ferry, "check", path, "--target", ",".join(TARGETS), "--json"], capture_output=True,
                           text=True)
        try:
            rep = json.loads(r.stdout)
        except json.JSONDecodeError:
            problems.append(f"{case}: no JSON (exit {r.returncode}): {r.stderr.strip()}")
            continue
        if r.returncode != (0 if rep["passed"] else 2):
            problems.append(f"{case}: exit {r.returncode} but passed={rep['passed']}")
        by_target = {t["target"]: t for t in rep["targets"]}
        for name in ("cpu", "cpu-ref"):
            if not by_target[name]["passed"]:
                problems.append(f"{case}: ferry's {name} backend does not pass: {by_target[name]['findings'][:3]}")
        for t in rep["targets"]:
            for f in t["findings"]:
                if not f["reason"]:
                    problems.append(f"{case}/{t['target']}/{f['node']}: finding without a reason")
                if f["verdict"] == "fails" and not f["fix"]:
                    problems.append(f"{case}/{t['target']}/{f['node']}: failure without a fix")
        rows.append((case, [cell(by_target[n]) for n in TARGETS]))
    header = "| model | " + " | ".join(TARGETS) + " |\n|---|" + "---|" * len(TARGETS) + "\n"
    table = header + "".join(f"| {case} | " + " | ".join(cells) + " |\n" for case, cells in rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if problems:
        print("\n".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()

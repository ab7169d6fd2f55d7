#!/usr/bin/python3
"""`ferry check` end to end on a model built to trip each shipped target differently.

    check_cli_test.py FERRY WORKDIR

The model (opset 15) has a Resize in cubic mode (TensorRT and the 2022 Ascend parser lack it),
a CastLike (absent from the 2022 Ascend list: ferry reports it "runs via decomposition" into
Cast), a Det (TensorRT and OpenVINO lack it) and a HardSwish (every target has it). Each
target's verdict per node, the reasons and fixes, and the exit codes are checked.
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    det = helper.make_tensor_value_info("det", TensorProto.DOUBLE, [1, 1])
    hs = helper.make_tensor_value_info("hs", TensorProto.FLOAT, [1, 1, 4, 4])
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array(0.0, np.float64), "like")]
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="resize_cubic", mode="cubic",
                         coordinate_transformation_mode="pytorch_half_pixel"),
        helper.make_node("CastLike", ["up", "like"], ["up64"], name="castlike"),
        helper.make_node("Det", ["up64"], ["det"], name="det"),
        helper.make_node("HardSwish", ["x"], ["hs"], name="hardswish"),
    ]
    graph = helper.make_graph(nodes, "check_targets", [x], [det, hs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], producer_name="ferry-test")
    onnx.checker.check_model(model)
    onnx.save(model, path)


def check(ferry, model, target, *extra):
    r = subprocess.run([ferry, "check", model, "--target", target, "--json", *extra], capture_output=True, text=True)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"{target}: no JSON (exit {r.returncode}): {r.stdout}\n{r.stderr}")
    return r.returncode, report


def verdicts(target_report):
    return {f["node"]: f for f in target_report["findings"]}


def main():
    ferry, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "check_targets.onnx")
    build(model)
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    # target -> {node: (verdict, words the reason must contain, words the fix must contain)}; unlisted nodes run.
    expected = {
        "cpu": {},
        "cpu-ref": {},
        "tensorrt-10.1": {"resize_cubic": ("fails", ["mode='cubic'", "nearest, linear"], ["linear"]),
                          "det": ("fails", ["Det is listed as not supported"], ["keep this node off"])},
        "ascend-atc-2022": {"resize_cubic": ("fails", ["mode='cubic'"], ["linear"]),
                            "castlike": ("decomposed", ["CastLike is not in the target's operator list"], ["Cast("])},
        "ascend-atc-2025": {},
        "openvino": {"det": ("fails", ["Det is listed as not supported"], ["HETERO"])},
    }
    for target, nodes in expected.items():
        rc, report = check(ferry, model, target)
        (t,) = report["targets"]
        got = verdicts(t)
        should_fail = any(v[0] == "fails" for v in nodes.values())
        expect(rc == (2 if should_fail else 0), f"{target}: exit {rc}, expected {2 if should_fail else 0}")
        expect(t["passed"] == (not should_fail), f"{target}: passed={t['passed']}")
        expect(t["nodes"] == 4, f"{target}: {t['nodes']} nodes checked, expected 4")
        expect(set(got) == set(nodes), f"{target}: findings for {sorted(got)}, expected {sorted(nodes)}")
        for node, (verdict, reason_words, fix_words) in nodes.items():
            f = got.get(node)
            if not f:
                continue
            expect(f["verdict"] == verdict, f"{target}/{node}: verdict {f['verdict']}, expected {verdict}")
            for w in reason_words:
                expect(w in f["reason"], f"{target}/{node}: reason {f['reason']!r} lacks {w!r}")
            for w in fix_words:
                expect(w in f["fix"], f"{target}/{node}: fix {f['fix']!r} lacks {w!r}")
        if target == "tensorrt-10.1":
            expect("Supported resize modes" in got["resize_cubic"].get("target_says", ""),
                   "tensorrt-10.1/resize_cubic: the profile's restriction text is not shown verbatim")

    # Several targets in one report: one failing target makes the exit code 2; the order is kept.
    rc, report = check(ferry, model, "cpu,ascend-atc-2025,tensorrt-10.1")
    expect(rc == 2, f"multi-target: exit {rc}, expected 2")
    expect([t["target"] for t in report["targets"]] == ["cpu", "ascend-atc-2025", "tensorrt-10.1"], "multi-target order")
    rc, _ = check(ferry, model, "cpu,ascend-atc-2025")
    expect(rc == 0, f"passing targets: exit {rc}, expected 0")

    # Text output has the summary table; an unknown target is exit 2 naming the known ones.
    r = subprocess.run([ferry, "check", model, "--target", "cpu,tensorrt-10.1"], capture_output=True, text=True)
    expect("summary" in r.stdout and "tensorrt-10.1" in r.stdout and "FAIL" in r.stdout, "text report lacks the summary")
    r = subprocess.run([ferry, "check", model, "--target", "tpu-v9"], capture_output=True, text=True)
    expect(r.returncode == 2 and "unknown target 'tpu-v9'" in r.stderr and "openvino" in r.stderr,
           f"unknown target: exit {r.returncode}: {r.stderr}")

    # Works from any directory (profiles are embedded).
    r = subprocess.run([os.path.abspath(ferry), "check", os.path.abspath(model), "--target", "openvino", "--json"],
                       capture_output=True, text=True, cwd="/")
    expect(r.returncode == 2 and json.loads(r.stdout)["targets"][0]["fails"] == 1, "check from / differs")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("check_cli_test: all targets reported as expected")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""`ferry doctor --json` describes this machine, and its exit code follows the policy in
src/check/doctor.h: 1 exactly when a compiled-in backend cannot run here (a CUDA build on a
machine without a GPU), else 0. Holds on GPU and GPU-less machines alike.

    doctor_test.py FERRY
"""
import json
import os
import subprocess
import sys


def main():
    r = subprocess.run([os.path.abspath(sys.argv[1]), "doctor", "--json"], capture_output=True, text=True, cwd="/")
    rep = json.loads(r.stdout)
    problems = []
    names = {b["name"]: b for b in rep["backends"]}
    for cpu in ("cpu", "cpu-ref"):
        if not names.get(cpu, {}).get("usable"):
            problems.append(f"{cpu} backend reported unusable: {names.get(cpu)}")
    unusable = [b for b in rep["backends"] if not b["usable"]]
    if r.returncode != (1 if unusable else 0) or rep["exit_code"] != r.returncode:
        problems.append(f"exit {r.returncode} with unusable backends {[b['name'] for b in unusable]}")
    for b in unusable:
        if not b["detail"] or not b["fix"]:
            problems.append(f"{b['name']}: unusable without a reason and a fix")
    if rep["cpu"]["threads"] < 1 or rep["memory"]["total_bytes"] <= 0 or not rep["cpu"]["model"]:
        problems.append(f"cpu/memory not described: {rep['cpu']} {rep['memory']}")
    cuda = rep["cuda"]
    if not cuda["gpus"] and not cuda["problem"]:
        problems.append("no GPU and no reason given")
    if cuda["compiled_in"] != ("cuda" in names):
        problems.append("cuda.compiled_in disagrees with the backend list")
    for lib in ("oneDNN", "protobuf", "ONNX"):
        if not rep["libraries"].get(lib):
            problems.append(f"{lib} version missing")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("doctor_test: ok (" + rep["verdict"] + ")")


if __name__ == "__main__":
    main()

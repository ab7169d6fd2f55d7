"""`ferry train --amp bf16|fp16` (issue 19), on the small models of train_models.py:
- bf16 and fp16 runs track the fp32 losses (within 2e-2 relative over 10 steps) yet differ from
  them (the matrix ops really are rounded);
- --keep-fp32 naming every Conv/Gemm/MatMul gives exactly the fp32 losses (nothing else is low);
- fp16 turns GradScaler on (loss_scale 65536 in the log), bf16 does not; the trained model keeps
  f32 weights; an unknown --keep-fp32 name is refused.

usage: check_train_amp.py FERRY WORKDIR"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_models as tm  # noqa: E402

FERRY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
failures = []


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        failures.append(msg)
    return cond


def ferry(*args, expect=0):
    p = subprocess.run([FERRY, "train", *map(str, args)], capture_output=True, text=True, timeout=120)
    check(p.returncode == expect if expect == 0 else p.returncode != 0,
          f"ferry train {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return p


def losses(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip() and '"step"' in line and "eval_loss" not in line]


for kind in ["cnn", "block"]:
    d = os.path.join(WORK, kind)
    os.makedirs(d, exist_ok=True)
    model, shape, classes = tm.make(kind)
    path = os.path.join(d, "model.onnx")
    tm.export(model, shape, path)
    x, y = tm.data(shape, classes, 32, seed=1)
    data = os.path.join(d, "data.npz")
    np.savez(data, x=x, labels=y)
    common = [path, "--data", data, "--batch-size", 8, "--steps", 10, "--no-shuffle", "--optimizer", "sgd",
              "--momentum", 0.9, "--lr", 0.05, "-q", "--threads", 1]
    runs = {}
    for amp in ["fp32", "bf16", "fp16"]:
        log = os.path.join(d, amp + ".jsonl")
        ferry(*common, *([] if amp == "fp32" else ["--amp", amp]), "--log", log, "--out", os.path.join(d, amp + ".onnx"))
        runs[amp] = losses(log)
    ref = [r["loss"] for r in runs["fp32"]]
    for amp in ["bf16", "fp16"]:
        got = [r["loss"] for r in runs[amp]]
        rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        print(f"{kind} {amp}: max relative loss difference to fp32 over {len(got)} steps {rel:.2e}")
        check(len(got) == 10 and rel <= 2e-2, f"{kind} {amp}: losses do not track fp32 (max rel {rel:.2e})")
        check(got != ref, f"{kind} {amp}: losses identical to fp32 (nothing ran in low precision)")
        out = onnx.load(os.path.join(d, amp + ".onnx"))
        check(all(t.data_type == onnx.TensorProto.FLOAT for t in out.graph.initializer if t.data_type in
                  (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)),
              f"{kind} {amp}: the trained model's weights are not f32 masters")
    check(runs["fp16"][0].get("loss_scale") == 65536 and not any(r["skipped"] for r in runs["fp16"]),
          f"{kind} fp16: GradScaler not on at 65536 ({runs['fp16'][0]})")
    check("loss_scale" not in runs["bf16"][0], f"{kind} bf16: a loss scaler is on without being asked")
    # Every matrix op kept in f32: exactly the fp32 run.
    mats = [n.name for n in onnx.load(path).graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
    log = os.path.join(d, "keep.jsonl")
    ferry(*common, "--amp", "bf16", "--keep-fp32", ",".join(mats), "--log", log)
    check([r["loss"] for r in losses(log)] == ref, f"{kind}: --keep-fp32 {mats} does not give the fp32 losses")
    ferry(*common, "--amp", "bf16", "--keep-fp32", "no_such_node", expect=2)

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("amp checks passed")

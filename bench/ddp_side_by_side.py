"""Data-parallel `ferry train` against one process, side by side (issue 20's speed check).

Exports torchvision's ResNet-18 (100 classes, training mode, opset 17), writes a random .npz, then
runs, interleaved (`--rounds` times):
  1 x 1: ferry train MODEL --data D --batch-size B --steps S --threads 1 ...
  N x 1: ferry train MODEL --data D --batch-size B --steps S --nproc N --threads N ...  (B per rank)
  N x 1 independent: N single-process runs at once, no communication: the machine's ceiling for
        N x 1 (on a shared machine the cores may not all be free).
  N x 1 --sync-bn (with --sync-bn): the N x 1 run with synchronized BatchNorm.
Step 1 is warm-up; steps 2..S are timed from rank 0's log. Prints samples/s of each (B / step time,
N*B / step time), the speed-up, and the share of the step rank 0 spent waiting on communication
after backward (comm_wait_ms / time_ms: the allreduce time that did not overlap backward).
The machine may be shared: compare interleaved runs, not absolute times across runs.

usage: /usr/bin/python3 bench/ddp_side_by_side.py [--ferry build/ferry] [--nproc 2] [--batch 16]
           [--steps 5] [--rounds 1] [--work /tmp/ferry_ddp_bench] [--json out.json] [--sync-bn]"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def export(work, batch):
    import warnings

    import numpy as np
    import torch
    import torchvision
    warnings.filterwarnings("ignore")
    model = os.path.join(work, "resnet18.onnx")
    if not os.path.exists(model):
        m = torchvision.models.resnet18(num_classes=100)
        torch.onnx.export(m.train(), torch.zeros(batch, 3, 224, 224), model,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=17, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}})
    data = os.path.join(work, "data.npz")
    if not os.path.exists(data):
        rng = np.random.default_rng(0)
        np.savez(data, x=rng.standard_normal((4 * batch, 3, 224, 224), dtype=np.float32),
                 labels=rng.integers(0, 100, 4 * batch))
    return model, data


def run(ferry, model, data, batch, steps, nproc, work, extra=()):
    log = os.path.join(work, f"ddp_n{nproc}{'_'.join(extra)}.jsonl")
    cmd = [ferry, "train", model, "--data", data, "--batch-size", str(batch), "--steps", str(steps), "--no-shuffle",
           "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--log", log, "-q"]
    cmd += ["--nproc", str(nproc), "--threads", str(nproc)] if nproc > 1 else ["--threads", "1"]
    cmd += list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    lines = [json.loads(x) for x in open(log) if x.strip()]
    timed = [r for r in lines if "loss" in r and r["step"] >= 2]
    ms = statistics.median(r["time_ms"] for r in timed)
    wait = statistics.median(r.get("comm_wait_ms", 0.0) + r.get("sync_bn_wait_ms", 0.0) for r in timed)
    return {"ms_per_step": ms, "samples_per_s": nproc * batch * 1000.0 / ms, "comm_wait_ms": wait,
            "comm_wait_share": wait / ms}


def run_independent(ferry, model, data, batch, steps, nproc, work):
    procs, logs = [], []
    for i in range(nproc):
        log = os.path.join(work, f"indep_{i}.jsonl")
        logs.append(log)
        procs.append(subprocess.Popen([ferry, "train", model, "--data", data, "--batch-size", str(batch), "--steps",
                                       str(steps), "--no-shuffle", "--optimizer", "sgd", "--lr", "0.01", "--momentum",
                                       "0.9", "--log", log, "-q", "--threads", "1"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"independent run failed:\n{p.stderr.read()[-2000:]}")
    per = [statistics.median(json.loads(x)["time_ms"] for x in open(log) if x.strip() and json.loads(x)["step"] >= 2)
           for log in logs]
    return {"ms_per_step": max(per), "samples_per_s": sum(batch * 1000.0 / ms for ms in per), "comm_wait_ms": 0.0,
            "comm_wait_share": 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", default="build/ferry")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default="/tmp/ferry_ddp_bench")
    ap.add_argument("--json")
    ap.add_argument("--sync-bn", action="store_true", help="also N x 1 with --sync-bn (its comm wait adds sync_bn_wait_ms)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model, data = export(a.work, a.batch)
    names = ["1x1", f"{a.nproc}x1", f"{a.nproc}x1 independent"] + ([f"{a.nproc}x1 --sync-bn"] if a.sync_bn else [])
    results = {k: [] for k in names}
    for _ in range(a.rounds):
        results["1x1"].append(run(a.ferry, model, data, a.batch, a.steps, 1, a.work))
        results[names[1]].append(run(a.ferry, model, data, a.batch, a.steps, a.nproc, a.work))
        results[names[2]].append(run_independent(a.ferry, model, data, a.batch, a.steps, a.nproc, a.work))
        if a.sync_bn:
            results[names[3]].append(run(a.ferry, model, data, a.batch, a.steps, a.nproc, a.work, ["--sync-bn"]))
    summary = {}
    for name, rs in results.items():
        best = min(rs, key=lambda r: r["ms_per_step"])
        summary[name] = best
        print(f"{name} (batch {a.batch}/process): {best['ms_per_step']:.0f} ms/step, "
              f"{best['samples_per_s']:.2f} samples/s, comm wait {best['comm_wait_ms']:.1f} ms "
              f"({100 * best['comm_wait_share']:.1f}% of the step)")
    summary["speedup"] = summary[names[1]]["samples_per_s"] / summary["1x1"]["samples_per_s"]
    summary["ceiling"] = summary[names[2]]["samples_per_s"] / summary["1x1"]["samples_per_s"]
    print(f"speed-up {names[1]} / 1x1: {summary['speedup']:.2f}x (the machine's ceiling now, independent "
          f"processes: {summary['ceiling']:.2f}x)")
    if a.sync_bn:
        summary["sync_bn_speedup"] = summary[names[3]]["samples_per_s"] / summary["1x1"]["samples_per_s"]
        print(f"speed-up {names[3]} / 1x1: {summary['sync_bn_speedup']:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

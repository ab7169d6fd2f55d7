"""ferry train against PyTorch's own training loop, step time side by side.

Exports torchvision's ResNet-50 (100 classes, training mode, opset 17), writes a random .npz data
set, then for each thread count runs, interleaved (`--rounds` times):
  ferry train MODEL --data D --batch-size B --steps S --no-shuffle --optimizer sgd --lr 0.01
        --momentum 0.9 --threads T --log L -q     (step 1 is warm-up: steps 2..S are timed)
  PyTorch 1.13: the same model, SGD momentum, cross entropy, torch.set_num_threads(T), S steps
        (step 1 warm-up, steps 2..S timed)
and prints the median ms/step of each (ferry's forward + backward, the log's compute_ms, too), the
ratio ferry / PyTorch and the load average; and the steady step time of each (median of steps 3..S:
ferry's step 2 is the first on its planned arena and first-touches its pages, ~1 s per GB on this
VM, once per run). The machine may be shared:
compare the ratio of interleaved runs, not absolute times across runs.

usage: /usr/bin/python3 bench/train_side_by_side.py [--ferry build/ferry] [--threads 2]
           [--batch 8] [--steps 6] [--rounds 1] [--work /tmp/ferry_train_bench] [--json out.json]
           [--variants fp32,recompute,bf16]   (ferry --recompute / --amp bf16 against PyTorch's
           checkpoint_sequential at the stage boundaries / autocast(cpu, bfloat16); interleaved)
(`/usr/bin/python3`: the interpreter with torch and torchvision.)"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def export(work, batch):
    import warnings
    import torch
    import torchvision
    warnings.filterwarnings("ignore")  # the export's per-BatchNorm notes on num_batches_tracked
    model = os.path.join(work, "resnet50.onnx")
    if not os.path.exists(model):
        m = torchvision.models.resnet50(num_classes=100)
        torch.onnx.export(m.train(), torch.zeros(batch, 3, 224, 224), model,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=17, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}})
    data = os.path.join(work, "data.npz")
    if not os.path.exists(data):
        rng = np.random.default_rng(0)
        np.savez(data, x=rng.standard_normal((2 * batch, 3, 224, 224), dtype=np.float32),
                 labels=rng.integers(0, 100, 2 * batch))
    return model, data


# --variants: ferry's extra flags and PyTorch's counterpart (TORCH_LOOP's `variant`).
VARIANTS = {"fp32": [], "recompute": ["--recompute"], "bf16": ["--amp", "bf16"]}


def ferry_ms(ferry, model, data, batch, steps, threads, work, variant="fp32"):
    log = os.path.join(work, f"ferry_t{threads}{'' if variant == 'fp32' else '_' + variant}.jsonl")
    cmd = [ferry, "train", model, "--data", data, "--batch-size", str(batch), "--steps", str(steps),
           "--no-shuffle", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
           "--threads", str(threads), "--log", log, "-q", *VARIANTS[variant]]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    step = statistics.mean(r["time_ms"] for r in rows[1:])
    compute = statistics.mean(r.get("compute_ms", float("nan")) for r in rows[1:])
    return step, compute, steady_ms([r["time_ms"] for r in rows])


def steady_ms(ts):
    """Median of steps 3..S: after the warm-up step and the first step on the planned arena (ferry's
    step 2 first-touches its arena's pages: ~1 s per GB on this VM), where PyTorch's allocator is warm."""
    return statistics.median(ts[2:]) if len(ts) >= 3 else float("nan")


# PyTorch's loop in a child process, so each run sets its own thread count from a clean start.
TORCH_LOOP = r"""
import sys, time, torch, torch.utils.checkpoint, torchvision
threads, batch, steps, variant = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
torch.manual_seed(0)
m = torchvision.models.resnet50(num_classes=100).train()
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 100, (batch,))
stem = torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)
body = torch.nn.Sequential(stem, m.layer1, m.layer2, m.layer3, m.layer4)
def forward():
    if variant == "recompute":  # torch.utils.checkpoint at ResNet's stem/stage boundaries (the last not recomputed)
        h = torch.utils.checkpoint.checkpoint_sequential(body, 5, x.requires_grad_())
        return m.fc(torch.flatten(m.avgpool(h), 1))
    if variant == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x)
    return m(x)
ts = []
for _ in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(forward().float(), y).backward()
    opt.step()
    ts.append((time.perf_counter() - t0) * 1000)
print(sum(ts[1:]) / len(ts[1:]))
print(" ".join("%.3f" % t for t in ts))
"""


def torch_ms(batch, steps, threads, variant="fp32"):
    p = subprocess.run([sys.executable, "-c", TORCH_LOOP, str(threads), str(batch), str(steps), variant],
                       check=True, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    return float(lines[-2]), steady_ms([float(v) for v in lines[-1].split()])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", default="build/ferry")
    ap.add_argument("--threads", default="2", help="comma-separated thread counts (at 1 thread PyTorch 1.13 runs ResNet-50's 1x1 convolutions on its THNN fallback, ~22 s a step: not a useful peer)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved ferry/PyTorch runs per thread count")
    ap.add_argument("--work", default="/tmp/ferry_train_bench")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--variants", default="fp32",
                    help="comma-separated: fp32, recompute (ferry --recompute; PyTorch checkpoint_sequential), "
                         "bf16 (ferry --amp bf16; PyTorch autocast cpu bfloat16)")
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be >= 2 (step 1 is warm-up)")
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant '{v}' (fp32, recompute, bf16)")
    os.makedirs(a.work, exist_ok=True)
    model, data = export(a.work, a.batch)
    results = []
    print(f"ResNet-50 (100 classes), batch {a.batch}, SGD momentum, {a.steps} steps per run "
          f"(first is warm-up), {a.rounds} interleaved round(s)")
    for t in [int(v) for v in a.threads.split(",")]:
        runs = {v: ([], [], [], [], []) for v in variants}  # ferry step, forward+backward, PyTorch, steady ferry, steady PyTorch
        for _ in range(a.rounds):
            for variant in variants:  # interleaved: the variants' ratios to fp32 see the same load
                fs, cs, ps, fss, pss = runs[variant]
                step, compute, steady = ferry_ms(a.ferry, model, data, a.batch, a.steps, t, a.work, variant)
                fs.append(step)
                cs.append(compute)
                fss.append(steady)
                pstep, psteady = torch_ms(a.batch, a.steps, t, variant)
                ps.append(pstep)
                pss.append(psteady)
        for variant in variants:
            fs, cs, ps, fss, pss = runs[variant]
            f, c, p = statistics.median(fs), statistics.median(cs), statistics.median(ps)
            fst, pst = statistics.median(fss), statistics.median(pss)
            results.append({"threads": t, "variant": variant, "ferry_ms": f, "ferry_compute_ms": c, "torch_ms": p,
                            "ratio": f / p, "ferry_runs": fs, "ferry_compute_runs": cs, "torch_runs": ps,
                            "ferry_steady_ms": fst, "torch_steady_ms": pst, "steady_ratio": fst / pst,
                            "load": os.getloadavg()[0]})
            print(f"threads {t}{'' if variant == 'fp32' else ' ' + variant}: ferry {f:8.1f} ms/step (forward+backward {c:.1f})   "
                  f"PyTorch {p:8.1f} ms/step   ratio {f / p:.3f}   load {os.getloadavg()[0]:.2f}", flush=True)
            print(f"           runs: ferry {[round(v) for v in fs]}  PyTorch {[round(v) for v in ps]}", flush=True)
            print(f"           steady (median of steps 3..{a.steps}): ferry {fst:.1f}  PyTorch {pst:.1f}  ratio {fst / pst:.3f}"
                  f"   runs: ferry {[round(v) for v in fss]}  PyTorch {[round(v) for v in pss]}", flush=True)
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "batch": a.batch, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()

"""ferry train against PyTorch's own training loop, step time side by side.

Exports torchvision's ResNet-50 (100 classes, training mode, opset 17), writes a random .npz data
set, then for each thread count runs, interleaved (`--rounds` times):
  ferry train MODEL --data D --batch-size B --steps S --no-shuffle --optimizer sgd --lr 0.01
        --momentum 0.9 --threads T --log L -q     (step 1 is warm-up: steps 2..S are timed)
  PyTorch 1.13: the same model, SGD momentum, cross entropy, torch.set_num_threads(T), S steps
        (step 1 warm-up, steps 2..S timed), in its default NCHW configuration and at its best
        (`--torch-configs nchw,channels_last`: model and input in torch.channels_last, which sends
        the convolutions to oneDNN's channels-last kernels; on AVX2 hosts ATen's best ISA is its
        default, ATEN_CPU_CAPABILITY=avx2; on AVX-512 hosts add ATEN_CPU_CAPABILITY=avx512 to the
        environment of the whole run)
and prints the median ms/step of each (ferry's forward + backward, the log's compute_ms, too), the
ratio ferry / PyTorch and the load average; the steady step time of each (median of steps 3..S:
ferry's step 2 is the first on its planned arena); steps 1 and 2 and the time to the first steady
step (from the process's start to step 2's end: ferry's log elapsed_ms, PyTorch's loop from before
`import torch`); and the steady step's fraction of the FMA peak (--peak: the direct-convolution
flop count of forward + backward-data + backward-weights, over `threads` copies of bench/fma_probe.c
run at once before the runs, GFLOP/s per CPU-second summed). The machine may be shared:
compare the ratio of interleaved runs, not absolute times across runs.

usage: /usr/bin/python3 bench/train_side_by_side.py [--ferry build/ferry] [--threads 2]
           [--batch 8] [--steps 6] [--rounds 1] [--work /tmp/ferry_train_bench] [--json out.json]
           [--variants fp32,recompute,bf16]   (ferry --recompute / --amp bf16 against PyTorch's
           checkpoint_sequential at the stage boundaries / autocast(cpu, bfloat16); interleaved)
           [--torch-configs nchw,channels_last] [--no-peak]
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
    ts = [r["time_ms"] for r in rows]
    first = {"step1_ms": ts[0], "step2_ms": ts[1] if len(ts) > 1 else float("nan"),
             "to_first_steady_ms": rows[1].get("elapsed_ms", float("nan")) if len(rows) > 1 else float("nan")}
    return step, compute, steady_ms(ts), first


def steady_ms(ts):
    """Median of steps 3..S: after the warm-up step and the first step on the planned arena (ferry's
    step 2 first-touches its arena's pages: ~1 s per GB on this VM), where PyTorch's allocator is warm."""
    return statistics.median(ts[2:]) if len(ts) >= 3 else float("nan")


# PyTorch's loop in a child process, so each run sets its own thread count from a clean start.
TORCH_LOOP = r"""
import sys, time
t_start = time.perf_counter()  # before `import torch`: the time to the first steady step counts it
import torch, torch.utils.checkpoint, torchvision
threads, batch, steps, variant, config = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.set_num_threads(threads)
torch.manual_seed(0)
m = torchvision.models.resnet50(num_classes=100).train()
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 100, (batch,))
if config == "channels_last":  # oneDNN's channels-last convolutions (PyTorch's fastest CPU configuration)
    m = m.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
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
ts, ends = [], []
for _ in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(forward().float(), y).backward()
    opt.step()
    ts.append((time.perf_counter() - t0) * 1000)
    ends.append((time.perf_counter() - t_start) * 1000)
print(ends[1] if len(ends) > 1 else float("nan"))
print(sum(ts[1:]) / len(ts[1:]))
print(" ".join("%.3f" % t for t in ts))
"""


def torch_ms(batch, steps, threads, variant="fp32", config="nchw"):
    p = subprocess.run([sys.executable, "-c", TORCH_LOOP, str(threads), str(batch), str(steps), variant, config],
                       check=True, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    ts = [float(v) for v in lines[-1].split()]
    first = {"step1_ms": ts[0], "step2_ms": ts[1] if len(ts) > 1 else float("nan"), "to_first_steady_ms": float(lines[-3])}
    return float(lines[-2]), steady_ms(ts), first


def step_gflop(batch, image=224):
    """ResNet-50 (100 classes) training step, direct count: 2 flop per multiply-add of every
    convolution and the classifier, forward + backward-data + backward-weights (the first
    convolution has no backward-data: its input needs no gradient)."""
    import torch
    import torchvision
    m = torchvision.models.resnet50(num_classes=100)
    macs = []

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            k = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
            macs.append((mod, out.numel() * k))
        elif isinstance(mod, torch.nn.Linear):
            macs.append((mod, out.numel() * mod.in_features))
    for mod in m.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        m.eval()(torch.zeros(batch, 3, image, image))
    return sum(2 * n * (2 if mod is m.conv1 else 3) for mod, n in macs) * 1e-9


def peak_gflops(threads):
    """`threads` copies of bench/fma_probe.c at once, GFLOP/s per CPU-second (best burst) summed:
    the cores' FMA peak in the same minutes (a slower core or clock shows here, not as the engines'
    fault). None when the probe cannot be built."""
    import tempfile
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_probe.c")
    exe = os.path.join(tempfile.gettempdir(), f"ferry_fma_probe_{os.getpid()}")
    try:
        if subprocess.run(["gcc", "-O3", "-march=native", "-o", exe, src], capture_output=True).returncode != 0:
            return None
        procs = [subprocess.Popen([exe, "3"], stdout=subprocess.PIPE, text=True) for _ in range(threads)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if os.path.exists(exe):
            os.remove(exe)
    total = 0.0
    for out in outs:
        rates = [float(line.split(":")[1].split()[0]) for line in out.splitlines() if line.startswith("burst")]
        if not rates:
            return None
        total += max(rates)
    return total


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
    ap.add_argument("--torch-configs", default="nchw,channels_last",
                    help="comma-separated PyTorch configurations, each run interleaved with ferry: nchw (its default), "
                         "channels_last (its best on CPU); the ratio 'best' is against the faster one")
    ap.add_argument("--no-peak", action="store_true", help="skip the FMA peak probe (bench/fma_probe.c)")
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (step 1 is warm-up, steps 3.. are the steady ones)")
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant '{v}' (fp32, recompute, bf16)")
    configs = a.torch_configs.split(",")
    for c in configs:
        if c not in ("nchw", "channels_last"):
            ap.error(f"--torch-configs: unknown configuration '{c}' (nchw, channels_last)")
    os.makedirs(a.work, exist_ok=True)
    model, data = export(a.work, a.batch)
    gflop = step_gflop(a.batch)
    results = []
    print(f"ResNet-50 (100 classes), batch {a.batch}, SGD momentum, {a.steps} steps per run "
          f"(first is warm-up), {a.rounds} interleaved round(s); {gflop:.1f} GFLOP a step (direct count); "
          f"load {' '.join('%.2f' % v for v in os.getloadavg())}", flush=True)
    for t in [int(v) for v in a.threads.split(",")]:
        peak = None if a.no_peak else peak_gflops(t)
        if peak:
            print(f"threads {t}: FMA peak {peak:.1f} GFLOP/s ({t} x bench/fma_probe.c at once, per CPU-second)", flush=True)
        # per variant: ferry [(step, compute, steady, first)], PyTorch per config [(step, steady, first)]
        runs = {v: {"ferry": [], **{c: [] for c in configs}} for v in variants}
        for _ in range(a.rounds):
            for variant in variants:  # interleaved: the variants' ratios to fp32 see the same load
                for c in configs:
                    runs[variant]["ferry"].append(ferry_ms(a.ferry, model, data, a.batch, a.steps, t, a.work, variant))
                    runs[variant][c].append(torch_ms(a.batch, a.steps, t, variant, c))
        med = statistics.median
        for variant in variants:
            fr = runs[variant]["ferry"]
            f, cm, fst = med(r[0] for r in fr), med(r[1] for r in fr), med(r[2] for r in fr)
            ff = {k: med(r[3][k] for r in fr) for k in ("step1_ms", "step2_ms", "to_first_steady_ms")}
            load = os.getloadavg()[0]
            row = {"threads": t, "variant": variant, "ferry_ms": f, "ferry_compute_ms": cm, "ferry_steady_ms": fst,
                   "ferry_runs": [r[0] for r in fr], "ferry_steady_runs": [r[2] for r in fr], **{"ferry_" + k: v for k, v in ff.items()},
                   "step_gflop": gflop, "load": load}
            tag = "" if variant == "fp32" else " " + variant
            print(f"threads {t}{tag}: ferry {f:8.1f} ms/step (forward+backward {cm:.1f}), steady {fst:.1f} "
                  f"(runs {[round(r[2]) for r in fr]}); step 1 {ff['step1_ms']:.0f}, step 2 {ff['step2_ms']:.0f}, "
                  f"first steady step after {ff['to_first_steady_ms']:.0f} ms   load {load:.2f}", flush=True)
            if peak and variant == "fp32":
                row.update({"peak_gflops": peak, "ferry_gflops": gflop / fst * 1e3, "ferry_peak_fraction": gflop / fst * 1e3 / peak})
                print(f"           ferry steady {gflop / fst * 1e3:.1f} GFLOP/s = {gflop / fst * 1e3 / peak:.3f} of the peak", flush=True)
            best = None
            for c in configs:
                pr = runs[variant][c]
                p, pst = med(r[0] for r in pr), med(r[1] for r in pr)
                pf = {k: med(r[2][k] for r in pr) for k in ("step1_ms", "step2_ms", "to_first_steady_ms")}
                key = "torch" if c == "nchw" else "torch_" + c
                row.update({key + "_ms": p, key + "_steady_ms": pst, key + "_runs": [r[0] for r in pr],
                            key + "_steady_runs": [r[1] for r in pr], **{key + "_" + k: v for k, v in pf.items()},
                            key + "_steady_ratio": fst / pst})
                if c == "nchw":  # the keys of earlier versions of this script
                    row.update({"ratio": f / p, "steady_ratio": fst / pst})
                print(f"           PyTorch {c}: {p:8.1f} ms/step, steady {pst:.1f} (runs {[round(r[1]) for r in pr]}); "
                      f"step 1 {pf['step1_ms']:.0f}, step 2 {pf['step2_ms']:.0f}, first steady step after "
                      f"{pf['to_first_steady_ms']:.0f} ms; ferry / PyTorch: steady {fst / pst:.3f}, to first steady step "
                      f"{ff['to_first_steady_ms'] / pf['to_first_steady_ms']:.3f}", flush=True)
                if peak and variant == "fp32":
                    row[key + "_peak_fraction"] = gflop / pst * 1e3 / peak
                if best is None or pst < best[1]:
                    best = (c, pst)
            row.update({"torch_best_config": best[0], "torch_best_steady_ms": best[1], "best_steady_ratio": fst / best[1]})
            print(f"           steady ferry / PyTorch at its best ({best[0]}): {fst / best[1]:.3f}", flush=True)
            results.append(row)
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "batch": a.batch, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()

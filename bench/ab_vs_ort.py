#!/usr/bin/python3
"""A/B of ferry builds (or environment settings) interleaved with ONNX Runtime, for one model.

    /usr/bin/python3 bench/ab_vs_ort.py MODEL THREADS BATCH ROUNDS DURATION NAME=COMMAND [NAME=COMMAND ...]
        [--models /tmp/ferry_bench_models]

e.g.  bench/ab_vs_ort.py efficientnet_b0 1 1 6 1.5 old=/tmp/ferry_old new=build/ferry
      bench/ab_vs_ort.py efficientnet_b0 1 1 6 1.5 "off=env FERRY_NHWC_SWAP_OPERANDS=0 build/ferry" on=build/ferry

Each round runs every COMMAND as `COMMAND bench -t THREADS --duration DURATION --json MODEL -i ...`
(the order rotates from round to round), then bench/ort_bench.js with the same inputs; models and
inputs as bench/bench_models.py writes them (DIR/<model>/model.onnx, meta.json, b<BATCH>/input_<i>.npy).
Prints each round's p50 wall / process-CPU ms with the load average, then per engine the best and
median over the rounds and the median of the per-round ratios to ORT (wall p50). Needs
bench/node_modules/onnxruntime-node (bench/run_bench.sh installs it).
"""
import json
import os
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    args = sys.argv[1:]
    models = "/tmp/ferry_bench_models"
    if "--models" in args:
        i = args.index("--models")
        models = args[i + 1]
        del args[i:i + 2]
    if len(args) < 6 or args[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if args and args[0] in ("-h", "--help") else 2)
    model, threads, batch, rounds, duration = args[:5]
    engines = []
    for a in args[5:]:
        if "=" not in a:
            sys.exit(f"ab_vs_ort.py: '{a}' is not NAME=COMMAND")
        name, cmd = a.split("=", 1)
        engines.append((name, shlex.split(cmd)))
    mdir = os.path.join(models, model)
    onnx = os.path.join(mdir, "model.onnx")
    try:
        meta = json.load(open(os.path.join(mdir, "meta.json")))
    except OSError as e:
        sys.exit(f"ab_vs_ort.py: {e}; export the model first: bench/bench_models.py --out {models} --only {model}")
    inputs = [f"{n}={os.path.join(mdir, f'b{batch}', f'input_{i}.npy')}" for i, n in enumerate(meta["inputs"])]
    res = {n: [] for n, _ in engines}
    res["ort"] = []

    def run(cmd):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"ab_vs_ort.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
        d = json.loads(p.stdout)
        return d["latency_ms"]["p50"], d["cpu_ms"]["p50"]

    for r in range(int(rounds)):
        k = r % len(engines)
        line = f"r{r + 1} load {os.getloadavg()[0]:.2f}"
        for name, cmd in engines[k:] + engines[:k]:
            ferry_in = sum((["-i", s] for s in inputs), [])
            w, c = run(cmd + ["bench", "-t", threads, "--duration", duration, "--json", onnx] + ferry_in)
            res[name].append((w, c))
            line += f" {name}={w:.3f}/{c:.3f}"
        ort_in = sum((["--input", s] for s in inputs), [])
        w, c = run(["node", os.path.join(HERE, "ort_bench.js"), "--model", onnx, "--threads", threads,
                    "--duration", duration] + ort_in)
        res["ort"].append((w, c))
        print(line + f" ort={w:.3f}/{c:.3f}", flush=True)
    ort = res["ort"]
    for name, v in res.items():
        ws, cs = [x[0] for x in v], [x[1] for x in v]
        ratio = statistics.median(x[0] / y[0] for x, y in zip(v, ort))
        print(f"{name:10s} wall p50 best {min(ws):.3f} median {statistics.median(ws):.3f} | cpu p50 best {min(cs):.3f} "
              f"median {statistics.median(cs):.3f} | / ORT per round, median {ratio:.3f}")


if __name__ == "__main__":
    main()

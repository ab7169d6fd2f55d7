#!/usr/bin/python3
"""ferry against ONNX Runtime while another process takes a core away part of the time.

    /usr/bin/python3 bench/corunner_side_by_side.py --model LABEL:MODEL.onnx[:NAME=FILE.npy ...] [...]
        [--engine NAME[@T]=COMMAND ...] [--corunners none,busy,membw,wakeup,yield,faults,make]
        [--copies 1] [--threads 2] [--rounds 3] [--duration 2] [--json OUT.json]

e.g.  bench/corunner_side_by_side.py --model mb_int8:M.int8.onnx:input=in.npy \\
          --engine ferry=build/ferry --engine "spin=env GOMP_SPINCOUNT=10000 build/ferry" \\
          --engine ferry@1=build/ferry

For each co-runner (bench/corunner.c, built here into /tmp; `make` is two g++ -O2 compiles at a time, over
and over, as `make -j2` runs them; --copies N runs N of it) the co-runner starts in its own session (its own scheduler
autogroup, as another user's job would be), then each round runs every model on every engine, the order
rotating from round to round: each ferry COMMAND as `COMMAND bench MODEL -t THREADS --duration D --json`
(NAME@T: on T threads) and ONNX Runtime through bench/ort_bench.js (its default spinning pool); then the co-runner is killed.
Prints each round's p50 wall / process-CPU ms and the load average, then per co-runner and model each
engine's median p50, its slowdown against the same engine with no co-runner (`none`, which must come
first in --corunners for that column), and the median of the per-round ratios to ORT.
Needs bench/node_modules/onnxruntime-node (bench/run_bench.sh installs it).
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("none", "busy", "membw", "wakeup", "yield", "faults", "make")


def build_corunner():
    exe = "/tmp/ferry_corunner"
    src = os.path.join(HERE, "corunner.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run(["gcc", "-O2", "-o", exe, src], check=True)
    return exe


def start_corunner(kind, copies, exe):
    if kind == "none":
        return []
    if kind == "make":
        srcs = [os.path.join(HERE, f) for f in ("dw_fusion_probe.cpp", "dw_own_probe.cpp")]
        loop = " & ".join(f"g++ -O2 -mavx2 -mfma -c {shlex.quote(s)} -o /tmp/ferry_corunner_{i}.o"
                          for i, s in enumerate(srcs))
        cmd = ["bash", "-c", f"while true; do {loop}; wait; done"]
    else:
        cmd = [exe, kind]
    procs = [subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(copies)]
    time.sleep(0.5)
    return procs


def stop_corunner(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the co-runner's own session (make: its compilers too)
        except ProcessLookupError:
            pass
        p.wait()


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"corunner_side_by_side: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    d = json.loads(p.stdout)
    return {"p50": d["latency_ms"]["p50"], "p90": d["latency_ms"]["p90"], "cpu": d["cpu_ms"]["p50"],
            "idle": d.get("idle_threads", "")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="LABEL:MODEL.onnx[:NAME=FILE.npy ...]")
    ap.add_argument("--engine", action="append",
                    help="NAME=COMMAND for a ferry binary (default ferry=build/ferry); NAME@T=COMMAND runs it on T threads")
    ap.add_argument("--corunners", default="none,busy,membw,wakeup,faults,make")
    ap.add_argument("--copies", type=int, default=1, help="co-runner processes at once")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", default="2")
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()
    models = []
    for m in args.model:
        parts = m.split(":")
        if len(parts) < 2 or not os.path.exists(parts[1]):
            sys.exit(f"corunner_side_by_side: --model {m}: expected LABEL:MODEL.onnx[:NAME=FILE.npy ...] "
                     "with an existing model file")
        models.append((parts[0], parts[1], parts[2:]))
    engines = []
    for e in args.engine or [f"ferry={os.path.join(ROOT, 'build', 'ferry')}"]:
        if "=" not in e:
            sys.exit(f"corunner_side_by_side: --engine '{e}' is not NAME=COMMAND")
        name, cmd = e.split("=", 1)
        engines.append((name, shlex.split(cmd)))
    engines.append(("ort", None))
    threads = {n: n.split("@", 1)[1] if "@" in n else args.threads for n, _ in engines}
    kinds = args.corunners.split(",")
    for k in kinds:
        if k not in KINDS:
            sys.exit(f"corunner_side_by_side: unknown co-runner '{k}' (one of {', '.join(KINDS)})")
    if not os.path.exists(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        sys.exit("corunner_side_by_side: bench/node_modules/onnxruntime-node is missing (bench/run_bench.sh)")
    exe = build_corunner()
    rows = []
    for kind in kinds:
        procs = start_corunner(kind, args.copies, exe)
        try:
            for r in range(args.rounds):
                for label, path, inputs in models:
                    order = engines[r % len(engines):] + engines[:r % len(engines)]
                    line = f"{kind:7s} r{r + 1} {label:9s} load {os.getloadavg()[0]:5.2f}"
                    for name, cmd in order:
                        if cmd is None:
                            full = ["node", os.path.join(HERE, "ort_bench.js"), "--model", path, "--threads",
                                    threads[name], "--duration", args.duration]
                            full += sum((["--input", i] for i in inputs), [])
                        else:
                            full = cmd + ["bench", path, "-t", threads[name], "--duration", args.duration, "--json"]
                            full += sum((["--input", i] for i in inputs), [])
                        m = run_json(full)
                        m.update(corunner=kind, round=r, model=label, engine=name, load=os.getloadavg()[0])
                        rows.append(m)
                        idle = {"OMP_WAIT_POLICY=PASSIVE": " (passive)"}.get(m["idle"], "")
                        line += f" | {name} {m['p50']:.2f}/{m['cpu']:.2f}{idle}"
                    print(line, flush=True)
        finally:
            stop_corunner(procs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)

    def med(kind, label, name, key="p50"):
        v = [x[key] for x in rows if x["corunner"] == kind and x["model"] == label and x["engine"] == name]
        return statistics.median(v) if v else float("nan")

    print("\nco-runner model     engine     p50 ms  cpu ms  x none  / ORT (per round, median)")
    for kind in kinds:
        for label, _, _ in models:
            for name, _ in engines:
                per_round = []
                for r in range(args.rounds):
                    a = [x for x in rows if x["corunner"] == kind and x["model"] == label and x["round"] == r]
                    e = [x["p50"] for x in a if x["engine"] == name]
                    o = [x["p50"] for x in a if x["engine"] == "ort"]
                    if e and o:
                        per_round.append(e[0] / o[0])
                p50 = med(kind, label, name)
                base = med("none", label, name)
                print(f"{kind:9s} {label:9s} {name:10s} {p50:7.2f} {med(kind, label, name, 'cpu'):7.2f} "
                      f"{p50 / base:6.2f}  {statistics.median(per_round):.3f}")


if __name__ == "__main__":
    main()

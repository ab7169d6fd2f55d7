#!/usr/bin/env python3
"""ctest for `ferry bench` and `ferry profile` on the demo model: the JSON keys, the Chrome trace
format, --batch / --threads, the resident bytes by kind, and that the arena-backed timed runs compute what `ferry run` does.
No timing assertions (timing is for benchmarks only).

    check_bench_cli.py FERRY MODEL SAMPLE.npy WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(ferry, *args, expect=0):
    p = subprocess.run([ferry, *args], capture_output=True, text=True, timeout=300)
    check(p.returncode == expect, f"`ferry {' '.join(args)}` exited {p.returncode}, expected {expect}: {p.stderr.strip()}")
    return p


def check_bench_json(j, batch=None, threads=None, iterations=None):
    for key in ("latency_ms", "throughput_per_s", "load_ms", "peak_rss_bytes", "threads", "batch", "device"):
        check(key in j, f"bench JSON has '{key}'")
    lat = j.get("latency_ms", {})
    for key in ("min", "mean", "p50", "p90", "p99", "max"):
        check(isinstance(lat.get(key), (int, float)), f"latency_ms.{key} is a number")
    if all(isinstance(lat.get(k), (int, float)) for k in ("min", "p50", "p90", "p99", "max")):
        check(lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"], "percentiles are ordered")
        check(lat["min"] <= lat["mean"] <= lat["max"], "mean within [min, max]")
    check(j.get("throughput_per_s", 0) > 0, "throughput is positive")
    check(j.get("peak_rss_bytes", 0) > 1 << 20, "peak RSS is over 1 MiB")
    check(j.get("load_ms", -1) >= 0, "load time is not negative")
    if batch is not None:
        check(j.get("batch") == batch, f"batch is {batch}")
    if threads is not None:
        check(j.get("threads") == threads, f"threads is {threads}")
    if iterations is not None:
        check(j.get("iterations") == iterations, f"{iterations} timed runs")
    plan = j.get("memory_plan", {})
    check(plan.get("planned") is True, "a memory plan was made")
    check(0 < plan.get("arena_bytes", 0) <= plan.get("tensor_bytes", 0), "arena no larger than the tensors it holds")


def initializer_bytes(model):
    import onnx
    from onnx import numpy_helper
    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(model).graph.initializer)


def check_resident(ferry, model):
    """Executor::resident_bytes in bench's JSON and table. At -O0 the executor runs the file's own
    graph, so its weights are exactly the file's initializers; the demo's Conv and Gemm kernels keep
    packed forms on cpu, the reference kernels (cpu-ref) none."""
    want = initializer_bytes(model)
    for device, packs in (("cpu", True), ("cpu-ref", False)):
        p = run(ferry, "bench", model, "--json", "-n", "2", "-w", "0", "-O", "0", "--device", device)
        r = json.loads(p.stdout).get("resident_bytes", {}) if p.returncode == 0 else {}
        for key in ("weights", "packed_weights", "arena", "other", "process"):
            check(isinstance(r.get(key), int) and r[key] >= 0, f"{device}: resident_bytes.{key} is a count of bytes: {r}")
        if not all(isinstance(r.get(k), int) for k in ("weights", "packed_weights", "arena", "other", "process")):
            continue
        check(r["weights"] == want, f"{device}: resident weights {r['weights']} are the file's initializers' {want} bytes")
        check((r["packed_weights"] > 0) == packs,
              f"{device}: packed weights {r['packed_weights']} bytes ({'some' if packs else 'none'} expected)")
        check(r["arena"] > 0, f"{device}: the memory plan's arena is counted")
        check(r["process"] > r["weights"] + r["packed_weights"] + r["arena"] and r["other"] > 1 << 20,
              f"{device}: the process holds more than the executor (code, libraries): {r}")
        check(r["weights"] + r["packed_weights"] + r["arena"] + r["other"] == r["process"], f"{device}: the kinds add up: {r}")
    # Optimized by the executor (the default -O), from the .onnx: bench hands it the only reference
    # to the model, so the weights its kernels pack (the demo's Gemms) are held once, packed
    # (ExecutorOptions::release_weights, as `ferry run` does).
    p = run(ferry, "bench", model, "--json", "-n", "2", "-w", "0")
    r = json.loads(p.stdout).get("resident_bytes", {}) if p.returncode == 0 else {}
    check(isinstance(r.get("weights"), int) and r["weights"] < want and r.get("packed_weights", 0) > 0,
          f"bench releases the weights its kernels packed: resident weights below the file's {want} bytes: {r}")
    p = run(ferry, "bench", model, "-n", "1", "-w", "0")
    check("resident" in p.stdout and "packed weights" in p.stdout and "arena" in p.stdout,
          f"human table has the resident row: {p.stdout}")


def check_trace(path, nodes, runs):
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    check(isinstance(events, list) and events, "trace has a traceEvents list")
    xs = [e for e in events if e.get("ph") == "X"]
    for e in xs:
        ok = all(k in e for k in ("name", "ts", "dur", "pid", "tid")) and \
            isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        check(ok, f"X event has name/ts/dur/pid/tid: {e}")
        if not ok:
            break
    node_events = [e for e in xs if e.get("tid") == 1]
    check(len(node_events) == nodes * runs, f"one X event per node per run ({len(node_events)} != {nodes}x{runs})")
    check(all("inputs" in e.get("args", {}) and "outputs" in e.get("args", {}) for e in node_events),
          "node events carry input/output shapes")
    runs_events = [e for e in xs if e.get("tid") == 0]
    check(len(runs_events) == runs, "one X event per inference")
    check(any(e.get("ph") == "M" for e in events), "trace names its process and threads")


def main():
    ferry, model, sample, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    p = run(ferry, "bench", model, "--json", "-n", "4", "-w", "1")
    check_bench_json(json.loads(p.stdout), batch=1, iterations=4)
    p = run(ferry, "bench", model, "--json", "--batch", "3", "--threads", "1", "--iterations", "2", "--device", "cpu-ref")
    j = json.loads(p.stdout)
    check_bench_json(j, batch=3, threads=1, iterations=2)
    check(j.get("device") == "cpu-ref", "device is reported")
    check_resident(ferry, model)
    p = run(ferry, "bench", model, "--duration", "0.2", "-w", "0")
    check("latency" in p.stdout and "throughput" in p.stdout and "peak RSS" in p.stdout, "human table has its rows")
    # Idle-thread policy (src/tools/omp_defaults.cpp): the user's own settings win and are reported;
    # without them ferry picks a short spin or passive waiting, and says which.
    def idle(env_extra, prefix=()):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env.update(env_extra)
        q = subprocess.run(list(prefix) + [ferry, "bench", model, "--json", "-t", "2", "-n", "1", "-w", "0"],
                           capture_output=True, text=True, timeout=300, env=env)
        check(q.returncode == 0, f"bench with {env_extra} exited {q.returncode}: {q.stderr.strip()}")
        return json.loads(q.stdout).get("idle_threads", "") if q.returncode == 0 else ""
    check(idle({"OMP_WAIT_POLICY": "ACTIVE"}) == "OMP_WAIT_POLICY=ACTIVE", "a user's OMP_WAIT_POLICY is kept")
    check(idle({"GOMP_SPINCOUNT": "77"}) == "GOMP_SPINCOUNT=77", "a user's GOMP_SPINCOUNT is kept")
    check(idle({"FERRY_OMP_DEFAULTS": "0"}) == "libgomp defaults", "FERRY_OMP_DEFAULTS=0 leaves libgomp's defaults")
    chosen = idle({})
    check(chosen in ("OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=10000"), f"ferry chose an idle policy: {chosen!r}")
    # On one usable core ferry itself fills every core: its threads must not spin.
    if shutil.which("taskset"):
        one = idle({}, prefix=("taskset", "-c", "0"))
        check(one == "OMP_WAIT_POLICY=PASSIVE", f"one usable core gives passive waiting, got {one!r}")

    run(ferry, "bench", os.path.join(work, "missing.onnx"), expect=2)
    run(ferry, "bench", model, "--dim", "nonsense", expect=2)

    # The timed runs (arena memory) give what one `ferry run` gives, on both CPU devices.
    for device in ("cpu-ref", "cpu"):
        a, b = os.path.join(work, device + "_run"), os.path.join(work, device + "_bench")
        run(ferry, "run", model, "--input", sample, "--device", device, "--output-dir", a)
        run(ferry, "bench", model, "--input", sample, "--device", device, "-n", "3", "--output-dir", b)
        for f in sorted(os.listdir(a)):
            x, y = np.load(os.path.join(a, f)), np.load(os.path.join(b, f))
            check(x.shape == y.shape and np.array_equal(x, y), f"{device}: bench output {f} equals ferry run's")

    trace = os.path.join(work, "trace.json")
    p = run(ferry, "profile", model, "--json", "-n", "3", "-w", "1", "--trace", trace)
    prof = json.loads(p.stdout)
    rows = prof.get("nodes", [])
    check(rows and prof.get("runs") == 3, "profile JSON has node rows and 3 runs")
    totals = [r["total_ms"] for r in rows]
    check(totals == sorted(totals, reverse=True), "profile rows sorted by total time")
    check(all(r["calls"] == 3 for r in rows), "every node ran once per run")
    check(all(r.get("output_shapes") for r in rows), "rows have output shapes")
    own = prof.get("profiler_own_ms_per_run")
    node_sum = sum(totals) / 3
    check(own is not None and own > 0 and node_sum + own <= prof["run_mean_ms"] * 1.0001,
          f"profiler's own time is reported apart and fits in the run ({own} + nodes {node_sum} <= {prof['run_mean_ms']})")
    check_trace(trace, len(rows), 3)
    p = run(ferry, "profile", model, "-n", "2")
    check("Op type" in p.stdout and "Total ms" in p.stdout, "profile prints the node and op-type tables")
    check("(profiler's own bookkeeping)" in p.stdout, "profile prints its own bookkeeping time apart")

    print(f"{'FAILED' if FAILURES else 'OK'}: {len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())

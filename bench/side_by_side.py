#!/usr/bin/python3
"""ferry vs ONNX Runtime, side by side, in one run: same models, same inputs, interleaved.

    /usr/bin/python3 bench/side_by_side.py --ferry build/ferry --models DIR [--out docs/performance.md]
        [--threads 1,2] [--batches 1,8] [--rounds 2] [--duration 3] [--only resnet50,...] [--quick]

Run through bench/run_bench.sh, which installs onnxruntime-node and exports the models first
(bench/bench_models.py). For each model, batch and thread count the rounds alternate
`ferry bench --json` and bench/ort_bench.js (ORT: intra_op_num_threads = N, inter 1, all graph
optimizations) on the same .npy inputs; each engine's latency is its best p50 over the rounds
(the machine is shared: the best round is the least disturbed one). Correctness is checked in the
same run on the outputs of the timed runs: ferry (default opt level, "cpu") against ferry's
reference backend (cpu-ref, batch 1) and against ORT (every batch): cosine similarity and max abs
error. ferry's bf16 mode (--precision bf16) gets its own rows against ORT fp32. Load + first
inference (ORT session create + run; ferry load + executor create + run, from .onnx and from a
compiled .ferry) is measured per model at batch 1.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import tempfile
import sys
import time

import statistics

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL_ORDER = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert_encoder", "bilstm", "unet"]
MODEL_TITLES = {"resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2", "efficientnet_b0": "EfficientNet-B0",
                "vit_b_16": "ViT-B/16", "bert_encoder": "BERT-style encoder (6 layers, seq 128)",
                "bilstm": "BiLSTM (2 layers, seq 50)", "unet": "UNet (96x128)"}
# Run-to-run spread (p90 / p50 of one engine's timed runs in one round) above this: the row's figure
# is not steady enough to compare (issue 22); the report flags it.
SPREAD_LIMIT = 1.15



def split_summary(results):
    """'ResNet-50 b8: 2, ...' from the ferry runs' batch_split JSON (none: every batch ran whole)."""
    parts = []
    for name, m in results.get("models", {}).items():
        for row in m.get("rows", []):
            rows = {j.get("batch_split", {}).get("rows_per_part", 0) for j in row.get("ferry", []) if j}
            rows.discard(0)
            if rows and row["threads"] == 1:
                parts.append(f"{m.get('title', name)} b{row['batch']}: {', '.join(str(r) for r in sorted(rows))}")
    return "; ".join(parts) if parts else "none (every batch ran whole)"

def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_json(cmd, timeout, env=None):
    """Runs cmd; returns (parsed JSON of stdout, None) or (None, error text)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    if p.returncode != 0:
        text = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, text[-1][:300] if text else f"exit {p.returncode}"
    try:
        return json.loads(p.stdout), None
    except json.JSONDecodeError as e:
        return None, f"bad JSON: {e}"


def compare_dirs(ref_dir, got_dir, names):
    """Worst cosine / max abs error over the float outputs (None when a file is missing)."""
    worst_cos, worst_abs = 1.0, 0.0
    for n in names:
        a_path, b_path = os.path.join(ref_dir, n + ".npy"), os.path.join(got_dir, n + ".npy")
        if not (os.path.exists(a_path) and os.path.exists(b_path)):
            return None
        a, b = np.load(a_path).astype(np.float64).ravel(), np.load(b_path).astype(np.float64).ravel()
        if a.shape != b.shape:
            return {"cos": float("nan"), "max_abs": float("inf"), "note": "shape differs"}
        denom = np.linalg.norm(a) * np.linalg.norm(b)
        cos = float(np.dot(a, b) / denom) if denom > 0 else (1.0 if np.array_equal(a, b) else 0.0)
        worst_cos = min(worst_cos, cos)
        worst_abs = max(worst_abs, float(np.max(np.abs(a - b))) if a.size else 0.0)
    return {"cos": worst_cos, "max_abs": worst_abs}


def machine_info():
    info = {"platform": platform.platform(), "cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "Thread(s) per core", "L2 cache", "L3 cache"):
                info[k.strip()] = v.strip()
            if k.strip() == "Flags":
                flags = v.split()
                info["isa"] = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni") if f in flags)
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["memory"] = f.readline().split(":")[1].strip()
    except OSError:
        pass
    info["load_average_at_start"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    info["core_gflops_at_start"] = core_peak_gflops()
    info["bandwidth_gbs_at_start"] = memory_bandwidth_gbs()
    return info


def core_peak_gflops(bursts=3):
    """One core's f32 FMA rate (bench/fma_probe.c, GFLOP/s per CPU-second, best burst), so that a
    slower core (a shared host, a lower clock) can be told apart from a slower engine; None when
    the probe cannot be built here."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_probe.c")
    exe = os.path.join(tempfile.gettempdir(), f"ferry_fma_probe_{os.getpid()}")
    try:
        if subprocess.run(["gcc", "-O3", "-march=native", "-o", exe, src], capture_output=True).returncode != 0:
            return None
        out = subprocess.run([exe, str(bursts)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if os.path.exists(exe):
            os.remove(exe)
    rates = [float(line.split(":")[1].split()[0]) for line in out.splitlines() if line.startswith("burst")]
    return max(rates) if rates else None


def memory_bandwidth_gbs(bursts=4):
    """Triad bandwidth (bench/bw_probe.c, GB/s, best burst): one process alone, then the sum of two
    at once. A two-copy sum near one copy's figure means the two cores share one core's memory
    bandwidth (other tenants streaming on the host): 2-thread rows of memory-heavy models then slow
    down for either engine. (None, None) when the probe cannot be built here."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bw_probe.c")
    exe = os.path.join(tempfile.gettempdir(), f"ferry_bw_probe_{os.getpid()}")

    def best(out):
        rates = [float(line.split(":")[1].split()[0]) for line in out.splitlines() if line.startswith("burst")]
        return max(rates) if rates else None

    try:
        if subprocess.run(["gcc", "-O2", "-o", exe, src], capture_output=True).returncode != 0:
            return None, None
        one = best(subprocess.run([exe, str(bursts)], capture_output=True, text=True, timeout=120).stdout)
        procs = [subprocess.Popen([exe, str(bursts)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        rates = [best(o) for o in outs]
        two = sum(rates) if all(r is not None for r in rates) else None
        return one, two
    except (OSError, subprocess.SubprocessError):
        return None, None
    finally:
        if os.path.exists(exe):
            os.remove(exe)


class HostNoise:
    """The host's own run-to-run spread next to each row (bench/noise_probe.c): a pure FMA loop timed
    in bursts as long as the row's runs, on as many threads, right after the row's round. An engine
    cannot be steadier than this loop on the same cores in the same minutes."""

    def __init__(self, seconds):
        self.seconds, self.exe = seconds, None
        if seconds <= 0:
            return
        try:  # the loop is AVX-512 code: on a host without avx512f it would die of SIGILL
            with open("/proc/cpuinfo") as f:
                if " avx512f" not in f.read():
                    return
        except OSError:
            return
        src = os.path.join(HERE, "noise_probe.c")
        exe = os.path.join(tempfile.gettempdir(), f"ferry_noise_probe_{os.getpid()}")
        try:
            if subprocess.run(["gcc", "-O3", "-mavx512f", "-pthread", "-o", exe, src], capture_output=True).returncode == 0:
                self.exe = exe
        except OSError:
            pass

    def spread(self, threads, burst_ms):
        """p90/p50 of the loop's bursts of burst_ms on `threads` threads (at least 5 bursts), or None."""
        if not self.exe or not burst_ms:
            return None
        try:
            out = subprocess.run([self.exe, str(threads), f"{burst_ms:.3f}", str(self.seconds)], capture_output=True,
                                 text=True, timeout=60 + 20 * burst_ms / 1000).stdout.split()
            return float(out[out.index("spread") + 1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None

    def close(self):
        if self.exe and os.path.exists(self.exe):
            os.remove(self.exe)


def fmt_bandwidth(v):
    if not v or v[0] is None:
        return "?"
    return f"{v[0]:.0f} / {v[1]:.0f}" if v[1] is not None else f"{v[0]:.0f} / ?"


def git_version():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (" + uncommitted changes" if dirty else "")
    except OSError:
        return "?"


class Bench:
    def __init__(self, args):
        self.noise = HostNoise(args.host_noise_seconds)
        self.args = args
        self.work = args.work
        # --no-spin: idle OpenMP threads (ferry) block at once, like ORT's with allow_spinning = 0.
        # Otherwise each engine runs with its defaults: ORT spins; ferry spins briefly unless other
        # running work fills every core at start-up (src/tools/omp_defaults.cpp; logged per row).
        self.ferry_env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if args.no_spin else None
        self.results = {"models": {}, "machine": machine_info(), "ferry": git_version(), "command": args.command,
                        "started": datetime.datetime.now().isoformat(timespec="seconds")}

    @staticmethod
    def input_args(meta, bdir):
        out = []
        for i, name in enumerate(meta["inputs"]):
            out += ["--input", f"{name}={os.path.join(bdir, f'input_{i}.npy')}"]
        return out

    def ferry_bench(self, model, meta, bdir, threads, batch, out_dir=None, extra=()):
        a = self.args
        timing = [] if "-n" in extra else ["--duration", str(a.duration)]
        warmup = [] if "-w" in extra else ["-w", str(a.warmup)]
        cmd = [a.ferry, "bench", model, "--json", "-t", str(threads), "--batch", str(batch)] + warmup + \
            timing + self.input_args(meta, bdir) + list(extra)
        if out_dir:
            cmd += ["--output-dir", out_dir]
        return run_json(cmd, a.timeout, self.ferry_env)

    def ort_bench(self, model, meta, bdir, threads, out_dir=None, timing=None):
        a = self.args
        timing = timing or ["--warmup", str(a.warmup), "--duration", str(a.duration)]
        cmd = ["node", os.path.join(HERE, "ort_bench.js"), "--model", model, "--threads", str(threads)] + timing + \
            self.input_args(meta, bdir)
        if a.no_spin:
            cmd.append("--no-spin")
        if out_dir:
            cmd += ["--output-dir", out_dir]
        return run_json(cmd, a.timeout)

    def reference(self, name, model, meta):
        """cpu-ref outputs at batch 1 (the oracle)."""
        out = os.path.join(self.work, name, "cpu_ref_b1")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.args.ferry, "run", model, "--device", "cpu-ref", "--output-dir", out, "--json"] + \
            self.input_args(meta, os.path.join(self.args.models, name, "b1"))
        j, err = run_json(cmd, self.args.ref_timeout)
        return (out, None) if j else (None, err)

    def compiled(self, name, model):
        """A compiled .ferry of the model, or (None, why)."""
        out = os.path.join(self.work, name, "model.ferry")
        if not shutil.which(self.args.ferry) and not os.path.exists(self.args.ferry):
            return None, "no ferry"
        helpp = subprocess.run([self.args.ferry, "compile", "--help"], capture_output=True, text=True)
        if helpp.returncode != 0:
            return None, "`ferry compile` is not available in this build"
        batches = ",".join(str(b) for b in sorted(set(self.args.batch_list)))
        for opts in (["--dynamic-batch", batches], []):
            p = subprocess.run([self.args.ferry, "compile", model, "-o", out] + opts, capture_output=True, text=True,
                               timeout=self.args.timeout)
            if p.returncode == 0:
                return out, None
        return None, (p.stderr.strip().splitlines() or ["compile failed"])[-1][:200]

    def open_model(self, name):
        """The model's folder, its .onnx path and meta.json; makes its work folder."""
        mdir = os.path.join(self.args.models, name)
        with open(os.path.join(mdir, "meta.json")) as f:
            meta = json.load(f)
        os.makedirs(os.path.join(self.args.work, name), exist_ok=True)
        return mdir, os.path.join(mdir, "model.onnx"), meta

    def run_model(self, name):
        a = self.args
        mdir, model, meta = self.open_model(name)
        res = {"title": MODEL_TITLES.get(name, name), "rows": [], "bf16": [], "load": {}}
        self.results["models"][name] = res
        log(f"{name}: reference outputs (cpu-ref, batch 1)")
        ref_dir, ref_err = self.reference(name, model, meta)
        res["reference_error"] = ref_err
        for batch in a.batch_list:
            bdir = os.path.join(mdir, f"b{batch}")
            for threads in a.thread_list:
                row = {"batch": batch, "threads": threads, "ferry": [], "ort": [], "host": [], "errors": []}
                fout = os.path.join(a.work, name, f"ferry_b{batch}_t{threads}")
                oout = os.path.join(a.work, name, f"ort_b{batch}_t{threads}")
                for r in range(a.rounds):
                    first = r == 0
                    j, err = self.ferry_bench(model, meta, bdir, threads, batch, fout if first else None)
                    (row["ferry"].append(j) if j else row["errors"].append("ferry: " + err))
                    idle = f" (idle threads: {j.get('idle_threads')})" if j and threads > 1 else ""
                    j, err = self.ort_bench(model, meta, bdir, threads, oout if first else None)
                    (row["ort"].append(j) if j else row["errors"].append("onnxruntime: " + err))
                    # The host's spread in the same minutes, in bursts as long as this round's runs.
                    p50s = [x["latency_ms"]["p50"] for x in (row["ferry"][-1:] + row["ort"][-1:]) if x]
                    h = self.noise.spread(threads, sum(p50s) / len(p50s)) if p50s else None
                    if h is not None:
                        row["host"].append(h)
                    log(f"{name} b{batch} t{threads} round {r + 1}: ferry {best(row['ferry'])} ms{idle}, "
                        f"ORT {best(row['ort'])} ms; spread p90/p50 ferry {fmt_spread(worst_spread(row['ferry']), plain=True)}, "
                        f"ORT {fmt_spread(worst_spread(row['ort']), plain=True)}, host "
                        f"{fmt_spread(max(row['host']) if row['host'] else None, plain=True)}")
                row["vs_ort"] = compare_dirs(oout, fout, meta["outputs"])
                row["vs_ref"] = compare_dirs(ref_dir, fout, meta["outputs"]) if (ref_dir and batch == 1) else None
                res["rows"].append(row)
                if a.bf16:
                    bout = os.path.join(a.work, name, f"bf16_b{batch}_t{threads}")
                    j, err = self.ferry_bench(model, meta, bdir, threads, batch, bout, extra=["--precision", "bf16"])
                    res["bf16"].append({"batch": batch, "threads": threads, "ferry": j, "error": err,
                                        "ort_ms": best(row["ort"]), "vs_ort": compare_dirs(oout, bout, meta["outputs"]) if j else None})
                    log(f"{name} b{batch} t{threads} bf16: {j['latency_ms']['p50'] if j else err}")
        # Load + first inference at batch 1 with the most threads: ORT from the rows; ferry .onnx from
        # the rows; ferry .ferry measured here.
        threads = max(a.thread_list)
        row = next((r for r in res["rows"] if r["batch"] == a.batch_list[0] and r["threads"] == threads), None)
        if row and row["ort"] and row["ferry"]:
            res["load"]["ort_ms"] = min(o["create_ms"] + o["first_run_ms"] for o in row["ort"])
            res["load"]["ferry_onnx_ms"] = min(f["load_ms"] + f["first_run_ms"] for f in row["ferry"])
        if a.compiled:
            path, err = self.compiled(name, model)
            if path:
                bdir = os.path.join(mdir, f"b{a.batch_list[0]}")
                runs = []
                for _ in range(a.rounds):
                    j, err = self.ferry_bench(path, meta, bdir, threads, a.batch_list[0], extra=["-n", "1"])
                    if j:
                        runs.append(j)
                if runs:
                    res["load"]["ferry_compiled_ms"] = min(j["load_ms"] + j["first_run_ms"] for j in runs)
                    res["load"]["ferry_compiled_p50"] = min(j["latency_ms"]["p50"] for j in runs)
                else:
                    res["load"]["compiled_error"] = err
            else:
                res["load"]["compiled_error"] = err

    def load_only(self, name):
        """--load-only: load + first inference at the first batch and the most threads, the three
        engines interleaved per round (ORT session create + run; ferry from .onnx; ferry from the
        compiled .ferry), best of the rounds."""
        a = self.args
        mdir, model, meta = self.open_model(name)
        bdir, batch, threads = os.path.join(mdir, f"b{a.batch_list[0]}"), a.batch_list[0], max(a.thread_list)
        res = {"title": MODEL_TITLES.get(name, name), "rows": [], "bf16": [], "load": {}}
        self.results["models"][name] = res
        path, err = self.compiled(name, model)
        if not path:
            res["load"]["compiled_error"] = err
        runs = {"ort_ms": [], "ferry_onnx_ms": [], "ferry_compiled_ms": []}
        for r in range(a.rounds):
            j, e = self.ort_bench(model, meta, bdir, threads, timing=["--warmup", "1", "--iterations", "1"])
            if j:
                runs["ort_ms"].append(j["create_ms"] + j["first_run_ms"])
            for key, m in (("ferry_onnx_ms", model), ("ferry_compiled_ms", path)):
                if m:
                    j, e = self.ferry_bench(m, meta, bdir, threads, batch, extra=["-n", "1", "-w", "1"])
                    if j:
                        runs[key].append(j["load_ms"] + j["first_run_ms"])
            log(f"{name} load round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items() if v))
        for k, v in runs.items():
            if v:
                res["load"][k] = min(v)
                res["load"][k + "_all"] = v

    def run(self):
        names = [n for n in MODEL_ORDER if n in self.args.model_list]
        if self.args.load_only:
            for n in names:
                self.load_only(n)
            return self.results
        for n in names:
            self.run_model(n)
        self.results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        self.results["load_average_at_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        self.results["core_gflops_at_end"] = core_peak_gflops()
        self.results["bandwidth_gbs_at_end"] = memory_bandwidth_gbs()
        self.noise.close()
        return self.results


def best(runs):
    """Best p50 over rounds (ms), or None."""
    vals = [r["latency_ms"]["p50"] for r in runs if r]
    return round(min(vals), 3) if vals else None


def spread(run):
    """p90 / p50 of one round's timed runs, or None (ferry bench --json and ort_bench.js both give
    latency_ms.p50 and .p90)."""
    lat = (run or {}).get("latency_ms") or {}
    p50, p90 = lat.get("p50"), lat.get("p90")
    return p90 / p50 if p50 and p90 is not None and p50 > 0 else None


def round_ratio(row):
    """Median over the rounds of ferry's p50 / ORT's p50 in the same round, or None. Each round runs
    the two engines back to back, seconds apart, so a slow phase of the host that lasts longer than
    a round cancels out here, while best() picks each engine's best round on its own."""
    pairs = [f["latency_ms"]["p50"] / o["latency_ms"]["p50"] for f, o in zip(row.get("ferry", []), row.get("ort", []))
             if f and o and o["latency_ms"]["p50"]]
    return statistics.median(pairs) if pairs else None


def worst_spread(runs):
    """The highest p90/p50 over an engine's rounds, or None."""
    vals = [s for s in (spread(r) for r in runs) if s is not None]
    return max(vals) if vals else None


def unsteady_rows(results, limit=SPREAD_LIMIT):
    """Rows where either engine's p90/p50 in some round is above `limit`: a list of dicts (model
    title, batch, threads, engine, spread, and for ferry the share of wall time it had a core)."""
    out = []
    for res in results["models"].values():
        for row in res["rows"]:
            for engine in ("ferry", "ort"):
                s = worst_spread(row.get(engine, []))
                if s is None or s <= limit:
                    continue
                runs = [r for r in row[engine] if r and spread(r) == s]
                on_cpu = runs[0].get("on_cpu_share") if runs else None
                host = max(row["host"]) if row.get("host") else None
                out.append({"model": res["title"], "batch": row["batch"], "threads": row["threads"], "engine": engine,
                            "spread": s, "on_cpu_share": on_cpu, "host_spread": host})
    return out


def fmt_spread(s, limit=SPREAD_LIMIT, plain=False):
    """p90/p50 as text: bold (markdown) above `limit`, or marked "(unsteady)" when `plain`."""
    if s is None:
        return "—"
    if s <= limit:
        return f"{s:.2f}"
    return f"{s:.2f} (unsteady)" if plain else f"**{s:.2f}**"


def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_cmp(c):
    if not c:
        return "—"
    return f"{c['cos']:.6f} / {c['max_abs']:.1e}"


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt_gflops(v):
    return "?" if v is None else f"{v:.0f}"


def render(results, args):
    m = results["machine"]
    lines = ["# Performance: ferry vs ONNX Runtime (CPU)", "",
             "Generated by `bench/run_bench.sh` (bench/side_by_side.py); do not edit by hand. Latency is each "
             "engine's best p50 over the interleaved rounds (lower is better); ratio = ferry / ORT "
             "(below 1: ferry is faster). Correctness is measured on the outputs of the timed runs "
             "(cosine similarity / max abs error).", "",
             "```sh", results["command"], "```", "",
             "## Machine", "",
             f"- CPU: {m.get('Model name', '?')}, {m.get('cores')} cores visible ({m.get('isa', '')})",
             f"- memory {m.get('memory', '?')}; {m.get('platform')}",
             f"- load average at start: {m.get('load_average_at_start')}, at end: {results.get('load_average_at_end')} "
             "(the machine is shared with other jobs: figures are noisy; both engines see the same noise, interleaved)",
             "- one core's f32 FMA peak (bench/fma_probe.c, best of 3 bursts): at start "
             f"{fmt_gflops(m.get('core_gflops_at_start'))}, at end {fmt_gflops(results.get('core_gflops_at_end'))} GFLOP/s "
             "(a lower figure means a slower core for both engines, not a slower engine)",
             "- memory bandwidth (bench/bw_probe.c triad, GB/s, one process / two at once, summed): at start "
             f"{fmt_bandwidth(m.get('bandwidth_gbs_at_start'))}, at end {fmt_bandwidth(results.get('bandwidth_gbs_at_end'))} "
             "(a two-process sum near the one-process figure: the cores share one core's bandwidth, and "
             "2-thread rows of memory-heavy models slow down)",
             f"- ferry {results['ferry']}; ONNX Runtime {results.get('ort_version', '?')} (onnxruntime-node, CPU EP)",
             f"- run {results['started']} to {results.get('finished', '?')}; rounds {args.rounds}, "
             f"{args.duration} s of timed runs per engine per round after {args.warmup} warm-up runs",
             "- intra-op threads: " + (
                 "block while idle in both engines (--no-spin: ORT session.intra_op.allow_spinning=0, ferry "
                 "OMP_WAIT_POLICY=PASSIVE)" if args.no_spin else
                 "each engine's default idle policy: ORT's threads spin (allow_spinning=1); ferry's spin briefly "
                 "(GOMP_SPINCOUNT=10000), and block at once when other running work fills every core at start-up "
                 "(src/tools/omp_defaults.cpp; the log shows the choice per row). `--no-spin` makes both block"),
             "- batch splitting (ferry): a batch whose largest activation would overflow half the last-level cache "
             "runs as cache-sized parts when no node mixes batch rows (README, runtime/batch_split.h); the arena "
             "column then shows one part's plan. Rows per part here: " + split_summary(results), ""]
    ratios = {t: [] for t in args.thread_list}
    per_round = {t: [] for t in args.thread_list}
    worst = {t: (0, "") for t in args.thread_list}
    for threads in args.thread_list:
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| model | batch | ferry ms | ORT ms | ferry/ORT | per round | spread ferry / ORT / host | ferry vs cpu-ref (cos / max abs) | ferry vs ORT (cos / max abs) | arena / tensors |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
        for name, res in results["models"].items():
            for row in res["rows"]:
                if row["threads"] != threads:
                    continue
                f, o = best(row["ferry"]), best(row["ort"])
                ratio = f / o if f and o else None
                rr = round_ratio(row)
                if rr:
                    per_round[threads].append(rr)
                if ratio:
                    ratios[threads].append(ratio)
                    if ratio > worst[threads][0]:
                        worst[threads] = (ratio, f"{res['title']} b{row['batch']}")
                plan = row["ferry"][0].get("memory_plan", {}) if row["ferry"] else {}
                mem = (f"{plan['arena_bytes'] / 2**20:.1f} / {plan['tensor_bytes'] / 2**20:.1f} MiB"
                       if plan.get("planned") else "—")
                note = f" ({'; '.join(row['errors'])})" if row["errors"] else ""
                vs_ref = fmt_cmp(row["vs_ref"]) if row["batch"] == 1 else "(batch 1 only)"
                ratio_s = f"{ratio:.2f} | {rr:.2f}" if ratio and rr else (f"{ratio:.2f} | —" if ratio else "— | —")
                host = max(row["host"]) if row.get("host") else None
                spreads = (f"{fmt_spread(worst_spread(row['ferry']))} / {fmt_spread(worst_spread(row['ort']))} / "
                           f"{fmt_spread(host)}")
                lines.append(f"| {res['title']}{note} | {row['batch']} | {fmt_ms(f)} | {fmt_ms(o)} | {ratio_s} | "
                             f"{spreads} | {vs_ref} | {fmt_cmp(row['vs_ort'])} | {mem} |")
        g = geomean(ratios[threads])
        lines += ["", f"Geometric mean of ferry/ORT at {threads} thread{'s' if threads > 1 else ''}: "
                  f"**{g:.2f}** over {len(ratios[threads])} rows; highest: {worst[threads][0]:.2f} ({worst[threads][1]})."
                  if g else "", ""]
        gr = geomean(per_round[threads])
        if gr:
            hi = max(per_round[threads])
            lines += [f"Per round (ferry's p50 / ORT's p50 in the same round, the median over the rounds): geometric "
                      f"mean **{gr:.2f}**, highest {hi:.2f}. The first figure takes each engine's best round on its "
                      "own; this one compares the two engines seconds apart, so a slow phase of the host that "
                      "lasts longer than a round does not land on one engine only.", ""]
        flagged = [u for u in unsteady_rows(results) if u["threads"] == threads]
        lines += ["Spread is the highest p90/p50 over an engine's rounds; host is the same measure for a pure FMA "
                  "loop (bench/noise_probe.c: no memory traffic, the same work every burst) timed right after each "
                  "round in bursts as long as that round's runs, on as many threads: the host's own floor in those "
                  "minutes, which no engine can be steadier than. Above " f"{SPREAD_LIMIT} (bold) the row is "
                  "not steady enough to compare" + (": " + "; ".join(
                      f"{u['model']} b{u['batch']} {'ferry' if u['engine'] == 'ferry' else 'ORT'} {u['spread']:.2f}" +
                      (f" (on a core {100 * u['on_cpu_share']:.0f}% of the wall time" +
                       (f"; host {u['host_spread']:.2f}" if u.get("host_spread") else "") + ")" if u["on_cpu_share"] else
                       (f" (host {u['host_spread']:.2f})" if u.get("host_spread") else ""))
                      for u in flagged) + "." if flagged else ": none here."), ""]
    bf16_rows = [(res, r) for res in results["models"].values() for r in res["bf16"]]
    lines += ["## bf16 mode (ferry --precision bf16) against ORT fp32", ""]
    if not args.bf16:
        lines += ["Not measured in this run (--no-bf16).", ""]
    elif bf16_rows and all(r["ferry"] is None for _, r in bf16_rows):
        lines += [f"Skipped: ferry's bf16 mode did not run ({bf16_rows[0][1]['error']}).", ""]
    else:
        lines += ["| model | batch | threads | ferry bf16 ms | ORT fp32 ms | ratio | bf16 vs ORT fp32 (cos / max abs) |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for res, r in bf16_rows:
            f = r["ferry"]["latency_ms"]["p50"] if r["ferry"] else None
            ratio = f"{f / r['ort_ms']:.2f}" if f and r["ort_ms"] else "—"
            err = f" ({r['error']})" if r["error"] else ""
            lines.append(f"| {res['title']}{err} | {r['batch']} | {r['threads']} | {fmt_ms(f)} | {fmt_ms(r['ort_ms'])} | "
                         f"{ratio} | {fmt_cmp(r['vs_ort'])} |")
        lines.append("")
    lines += ["## Load + first inference (batch 1, "
              f"{max(args.thread_list)} threads)", "",
              "ORT: `InferenceSession.create` + first `run`. ferry: model load + executor create (passes, kernel "
              "creation, weight packing) + first run, from the .onnx and from a compiled .ferry (`ferry compile`).", "",
              "| model | ORT ms | ferry .onnx ms | ferry .ferry ms | ORT / ferry .ferry |", "|---|---:|---:|---:|---:|"]
    for res in results["models"].values():
        ld = res["load"]
        c = ld.get("ferry_compiled_ms")
        speed = f"{ld['ort_ms'] / c:.1f}x" if c and ld.get("ort_ms") else "—"
        note = f" ({ld['compiled_error']})" if ld.get("compiled_error") else ""
        lines.append(f"| {res['title']}{note} | {fmt_ms(ld.get('ort_ms'))} | {fmt_ms(ld.get('ferry_onnx_ms'))} | "
                     f"{fmt_ms(c)} | {speed} |")
    refs = [f"{res['title']}: {res['reference_error']}" for res in results["models"].values() if res.get("reference_error")]
    if refs:
        lines += ["", "cpu-ref reference runs that failed: " + "; ".join(refs)]
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--models", required=True, help="bench/bench_models.py --out DIR")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "performance.md"))
    ap.add_argument("--json-out", default="", help="also write the raw figures here")
    ap.add_argument("--work", default="/tmp/ferry_bench_work", help="outputs compared for correctness")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--only", default=",".join(MODEL_ORDER))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per engine invocation")
    ap.add_argument("--ref-timeout", type=int, default=1800)
    ap.add_argument("--no-spin", action="store_true",
                    help="make idle intra-op threads block at once in both engines (ORT "
                         "session.intra_op.allow_spinning=0, ferry OMP_WAIT_POLICY=PASSIVE); default: each "
                         "engine's own policy")
    ap.add_argument("--render-json", default="",
                    help="write --out from a --json-out file of an earlier run instead of measuring (give that "
                         "run's --rounds/--duration/--warmup/--threads/--batches so the header says them)")
    ap.add_argument("--host-noise-seconds", type=float, default=1.0,
                    help="seconds of bench/noise_probe.c bursts after each round (the host's own spread "
                         "column); 0: not measured")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false")
    ap.add_argument("--no-compiled", dest="compiled", action="store_false")
    ap.add_argument("--quick", action="store_true", help="batch 1, one round, 1 s per engine: for iterating")
    ap.add_argument("--command", default="", help="the command line to record in the report")
    ap.add_argument("--load-only", action="store_true",
                    help="only load + first inference (ORT, ferry .onnx, ferry .ferry; --rounds rounds, best of), "
                         "printed as a table; docs/performance.md is not written")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.rounds, args.duration, args.warmup = "1", 1, 1.0, 1
    args.thread_list = [int(t) for t in args.threads.split(",")]
    args.batch_list = [int(b) for b in args.batches.split(",")]
    args.model_list = [m for m in args.only.split(",") if m]
    args.command = args.command or " ".join(sys.argv)
    if not os.path.exists(args.ferry):
        print(f"side_by_side: ferry not found at {args.ferry} (build it, or pass --ferry)", file=sys.stderr)
        return 2
    if args.render_json:
        with open(args.render_json) as f:
            results = json.load(f)
        return write_report(results, args)
    os.makedirs(args.work, exist_ok=True)
    bench = Bench(args)
    ort_v = subprocess.run(["node", "-e", f"console.log(require('{HERE}/node_modules/onnxruntime-node').env.versions.common)"],
                           capture_output=True, text=True)
    bench.results["ort_version"] = ort_v.stdout.strip() or "?"
    results = bench.run()
    if not args.load_only:
        results["unsteady"] = unsteady_rows(results)
        for u in results["unsteady"]:
            log(f"spread above {SPREAD_LIMIT}: {u['model']} b{u['batch']} t{u['threads']} {u['engine']} "
                f"p90/p50 {u['spread']:.2f}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    if args.load_only:
        print(f"| model | ORT ms | ferry .onnx ms | ferry .ferry ms | ORT / ferry .ferry |  (best of {args.rounds}, "
              f"batch {args.batch_list[0]}, {max(args.thread_list)} threads)")
        for res in results["models"].values():
            ld = res["load"]
            c, o = ld.get("ferry_compiled_ms"), ld.get("ort_ms")
            print(f"| {res['title']} | {fmt_ms(o)} | {fmt_ms(ld.get('ferry_onnx_ms'))} | {fmt_ms(c)} | "
                  f"{f'{o / c:.1f}x' if c and o else '—'} |" + (f" {ld['compiled_error']}" if ld.get("compiled_error") else ""))
        return 0
    return write_report(results, args)


def write_report(results, args):
    """Writes render(results) to args.out, keeping the hand-written part from "## Training" on."""
    text = render(results, args)
    # The "## Training" section (bench/train_side_by_side.py) is written by hand: keep it.
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        if "\n## Training" in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index("\n## Training") + 1:]
    with open(args.out, "w") as f:
        f.write(text)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""bench/side_by_side.py's spread flag (issue 22): a row whose p90/p50 is above 1.15 in some round is
flagged, for either engine, in the log/JSON and in bold in the report; `ferry bench --json` gives
spread_p90_p50 = p90 / p50 and the CPU-time figures the flag note uses; `ferry profile --json`
gives CPU time per node. Small: a few sub-ms runs of the demo model.

    check_spread_flag.py FERRY MODEL.onnx
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import side_by_side as sbs  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(p50, p90, on_cpu=None):
    j = {"latency_ms": {"min": p50 * 0.9, "p50": p50, "p90": p90, "max": p90 * 1.1}}
    if on_cpu is not None:
        j["on_cpu_share"] = on_cpu
    return j


def results_with(rows):
    return {"models": {"m": {"title": "Model M", "rows": rows, "bf16": [], "load": {}}},
            "machine": {"cores": 2}, "command": "test", "ferry": "test", "started": "now"}


def main():
    ferry, model = sys.argv[1:3]
    check(sbs.spread(run(100, 115)) == 1.15, "spread = p90 / p50")
    check(sbs.spread(None) is None and sbs.spread({"latency_ms": {"p50": 0, "p90": 1}}) is None,
          "spread of a failed round or p50 = 0 is None")
    check(sbs.worst_spread([run(100, 110), None, run(200, 260)]) == 1.3, "worst spread over rounds")
    steady = {"batch": 1, "threads": 1, "ferry": [run(100, 115), run(90, 99)], "ort": [run(100, 101)],
              "errors": [], "vs_ref": None, "vs_ort": None}
    check(sbs.unsteady_rows(results_with([steady])) == [], "1.15 exactly is not flagged")
    bimodal = {"batch": 1, "threads": 1, "ferry": [run(180, 186, 0.99), run(652, 700, 0.3)],
               "ort": [run(190, 250)], "errors": [], "vs_ref": None, "vs_ort": None}
    bimodal["ferry"][0]["latency_ms"]["p90"] = 650  # round 1: half the runs slow
    flagged = sbs.unsteady_rows(results_with([steady, bimodal]))
    check(len(flagged) == 2 and {u["engine"] for u in flagged} == {"ferry", "ort"},
          f"both engines of the unsteady row flagged, the steady row not: {flagged}")
    f = [u for u in flagged if u["engine"] == "ferry"]
    check(f and abs(f[0]["spread"] - 650 / 180) < 1e-9 and f[0]["on_cpu_share"] == 0.99,
          "the ferry flag names the worst round's spread and its on-core share")
    args = argparse.Namespace(rounds=2, duration=1.0, warmup=1, no_spin=False, thread_list=[1], bf16=False)
    doc = sbs.render(results_with([steady, bimodal]), args)
    check("**3.61** / **1.32**" in doc and "1.15 / 1.01" in doc, "report: spreads per row, above 1.15 in bold")
    check("Model M b1 ferry 3.61" in doc and "Model M b1 ORT 1.32" in doc, "report: the flagged rows named")

    # Per-round ratio: the median over rounds of ferry's p50 / ORT's p50 in the same round.
    two = {"ferry": [run(90, 95), run(200, 210), run(95, 99)], "ort": [run(100, 101), run(100, 101), run(250, 260)]}
    check(abs(sbs.round_ratio(two) - 0.9) < 1e-9, "per-round ratio: the median of 0.9, 2.0, 0.38")
    check(sbs.round_ratio({"ferry": [None], "ort": [run(1, 1)]}) is None, "per-round ratio of failed rounds is None")
    # The host's own spread (bench/noise_probe.c) shown as the row's third spread, its worst round.
    hosted = dict(steady, host=[1.02, 1.20])
    doc = sbs.render(results_with([hosted]), args)
    check("1.15 / 1.01 / **1.20**" in doc, "report: the host's worst spread as the third figure, bold above 1.15")
    check("Per round (ferry's p50 / ORT's p50 in the same round" in doc and "| 0.90 | 1.00 | 1.15 / 1.01" in doc,
          "report: the per-round ratio per row (round 1 only: ORT ran one) and its geometric mean")
    noise = sbs.HostNoise(0.3)
    if noise.exe:  # gcc with AVX-512 intrinsics: built here
        h = noise.spread(1, 2.0)
        check(h is not None and 1.0 <= h < 10, f"noise_probe gives a plausible spread ({h})")
    noise.close()

    # A real run: ferry's JSON spread is its p90 / p50, and the flag logic takes ferry's JSON as is.
    p = subprocess.run([ferry, "bench", model, "--json", "-n", "6", "-w", "1", "-t", "1"], capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, f"ferry bench --json runs (rc {p.returncode}: {p.stderr[-300:]})")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        lat = j["latency_ms"]
        check(abs(j["spread_p90_p50"] - lat["p90"] / lat["p50"]) < 1e-9, "spread_p90_p50 = p90 / p50")
        check(j["spread_limit"] == sbs.SPREAD_LIMIT, "ferry's limit is the script's")
        cpu = j["cpu_ms"]
        check(0 < cpu["min"] <= cpu["p50"] <= cpu["p90"] <= cpu["max"], "cpu_ms percentiles ordered, positive")
        check(0 < j["on_cpu_share"] <= 1.5, f"on_cpu_share plausible ({j['on_cpu_share']:.2f})")
        check(j["machine"]["cores"] >= 1, "machine cores given")
        check(len(j["runs_ms"]) == len(j["runs_cpu_ms"]) == j["iterations"] == 6, "per-run wall and CPU times")
        check(abs(sorted(j["runs_ms"])[0] - lat["min"]) < 1e-9, "runs_ms are the timed runs")
        row = {"batch": 1, "threads": 1, "ferry": [j], "ort": [], "errors": [], "vs_ref": None, "vs_ort": None}
        got = sbs.unsteady_rows(results_with([row]))
        check(bool(got) == (j["spread_p90_p50"] > sbs.SPREAD_LIMIT), "a real run is flagged iff its spread > 1.15")
    p = subprocess.run([ferry, "bench", model, "-n", "3", "-w", "0"], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and "spread      p90/p50 " in p.stdout and "cpu ms      p50 " in p.stdout,
          "the table has the spread and cpu rows")
    p = subprocess.run([ferry, "profile", model, "--json", "-n", "4", "-w", "1", "-t", "1"], capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, "ferry profile --json runs")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        node_cpu = sum(n["cpu_total_ms"] for n in j["nodes"])
        check(j["run_mean_cpu_ms"] > 0 and 0 < j["on_cpu_share"] <= 1.5, "profile: CPU per run and on-core share")
        check(all(n["cpu_total_ms"] >= 0 and abs(n["cpu_mean_ms"] * n["calls"] - n["cpu_total_ms"]) < 1e-6
                  for n in j["nodes"]), "profile: per-node CPU ms, mean = total / calls")
        check(0 < node_cpu <= j["run_mean_cpu_ms"] * j["runs"] + 1e-6,
              f"profile: the nodes' CPU ({node_cpu:.3f} ms) within the runs' ({j['run_mean_cpu_ms'] * j['runs']:.3f} ms)")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Two ferry builds, alternated: `ferry bench` p50 of an int8 file and its fp32 model on each build.

    /usr/bin/python3 bench/ab_builds.py --new build/ferry --old OLD/build/ferry --fp32 M.onnx
        --int8 M.int8.onnx --input input=X.npy [--threads 1] [--rounds 20] [--duration 1]

Each round runs the four (build, file) pairs back to back, `--duration` seconds each, the order rotated
by one every round so each pair takes each slot equally often. Per round it records new int8 / new fp32,
old int8 / old fp32, new int8 / old int8 and new fp32 / old fp32 (latency p50s), and prints their
medians over the rounds with the lowest and highest. On a shared, uneven host only ratios taken within a
round mean anything; short rounds many times over resolve a few percent where one long run per engine
(bench/quant_side_by_side.py) does not.
"""
import argparse
import json
import os
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", required=True, help="the ferry binary under test")
    ap.add_argument("--old", required=True, help="the ferry binary to compare against")
    ap.add_argument("--fp32", required=True)
    ap.add_argument("--int8", required=True)
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy (repeat per input)")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--duration", default="1")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    binaries = {"new": a.new, "old": a.old}
    files = {"int8": a.int8, "fp32": a.fp32}
    inputs = [x for i in a.input for x in ("-i", i)]

    def bench(who, kind):
        cmd = [binaries[who], "bench", files[kind], "-t", a.threads, "--duration", a.duration, "--json"] + inputs
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise SystemExit(f"--{who} {binaries[who]}: cannot run it ({e.strerror}); give a built ferry binary")
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
        return json.loads(r.stdout)["latency_ms"]["p50"]

    order = [("new", "int8"), ("old", "int8"), ("new", "fp32"), ("old", "fp32")]
    ratios = {"new int8 / new fp32": [], "old int8 / old fp32": [], "new int8 / old int8": [], "new fp32 / old fp32": []}
    for r in range(a.rounds):
        k = r % len(order)
        p = {pair: bench(*pair) for pair in order[k:] + order[:k]}
        ratios["new int8 / new fp32"].append(p[("new", "int8")] / p[("new", "fp32")])
        ratios["old int8 / old fp32"].append(p[("old", "int8")] / p[("old", "fp32")])
        ratios["new int8 / old int8"].append(p[("new", "int8")] / p[("old", "int8")])
        ratios["new fp32 / old fp32"].append(p[("new", "fp32")] / p[("old", "fp32")])
        print(f"round {r + 1} load {os.getloadavg()[0]:.2f}: " + ", ".join(f"{w} {f} {p[(w, f)]:.2f} ms" for w, f in order),
              flush=True)
    for name, xs in ratios.items():
        print(f"{name}: median {statistics.median(xs):.3f} (lowest {min(xs):.3f}, highest {max(xs):.3f}, {len(xs)} rounds)")


if __name__ == "__main__":
    main()

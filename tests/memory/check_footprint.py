#!/usr/bin/python3
"""The memory footprint's regression checks (issue 40), all fast:

1. CPU-only commands map no CUDA library: `ferry --version`, `ferry run` and `ferry compile` on cpu
   load (LD_DEBUG=files) neither the cuda backend module nor cuBLAS / cuDNN / the CUDA runtime,
   while the same trace does show the libraries ferry links (oneDNN), so the check can see a load.
   When the build has the module, `--device cuda` does load it (and fails cleanly without a GPU).
2. Peak RSS (wait4's ru_maxrss): `ferry --version` under a bound CUDA's libraries alone exceed, and
   `ferry run` on a model of 28 MiB of weights, from the .onnx and from the .ferry file, within a
   bound in multiples of the weights over `ferry --version`'s.
3. The .ferry file of that model (compiled for cpu, with pre-packed weights) at most a bound times
   its ONNX file.
4. `ferry info`'s memory rows: how the weights are stored (plain, only packed, packed beside plain;
   the file's size), and with --resident what the process holds by kind after two runs: the kinds
   add up to the process, the .onnx's MatMul weights are released to their packed forms, a .ferry
   file's plain weights count only where resident.

    check_footprint.py FERRY WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MiB = 1 << 20
CUDA_LIBS = re.compile(r"libcublas|libcudnn|libcudart|libcuda\.so|libnvrtc|libferry_backend_cuda")
# Bounds (generous: a regression that brings CUDA back or a whole extra copy of the weights fails).
VERSION_RSS_MAX = 120 * MiB         # CUDA's libraries alone map ~220 MiB at start
RUN_RSS_OVER_VERSION_MAX = 3.0      # x weight bytes over `ferry --version`'s peak: 2.37 (.onnx), 2.11 (.ferry) today
FERRY_OVER_ONNX_MAX = 1.15          # .ferry bytes / .onnx bytes (cpu, pre-packed weights, each stored once): issue 40


def run(cmd, env=None):
    """Runs cmd; returns (exit code, stdout, stderr)."""
    r = subprocess.run(cmd, capture_output=True, env=env, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def peak_rss(cmd):
    """Peak RSS in bytes of cmd alone (wait4 on its pid), output discarded."""
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {code}")
    return usage.ru_maxrss * 1024


def loaded_libraries(cmd):
    env = dict(os.environ, LD_DEBUG="files")
    code, out, err = run(cmd, env)
    libs = set(re.findall(r"file=(\S+)\s+\[\d+\];\s+(?:needed by|dynamically loaded by)", err))
    return code, libs, out + err


def make_model(path):
    """Three convolutions (the cpu backend stores their packed weights in the .ferry file), a global
    pool and two MatMuls (1024x2048, 2048x2048): 28 MiB of weights. Returns the weights' bytes."""
    rng = np.random.default_rng(40)
    shapes = {"c1": (256, 128, 3, 3), "c2": (256, 256, 3, 3), "c3": (1024, 256, 1, 1), "m1": (1024, 2048),
              "m2": (2048, 2048)}
    inits = [numpy_helper.from_array(rng.standard_normal(s, dtype=np.float32) * 0.02, n) for n, s in shapes.items()]
    nodes = [helper.make_node("Conv", ["x", "c1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Conv", ["b", "c2"], ["c"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c"], ["d"], name="relu2"),
             helper.make_node("Conv", ["d", "c3"], ["e"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["e"], ["f"], name="pool"),
             helper.make_node("Flatten", ["f"], ["g"], name="flatten"),
             helper.make_node("MatMul", ["g", "m1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu3"),
             helper.make_node("MatMul", ["r", "m2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "footprint", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 14, 14])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.save(path.replace(".onnx", "_x.npy"), rng.standard_normal((1, 128, 14, 14), dtype=np.float32))
    return sum(int(np.prod(s)) * 4 for s in shapes.values())


def main():
    ferry, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    problems, report = [], []
    model = os.path.join(work, "footprint.onnx")
    weights = make_model(model)
    x = model.replace(".onnx", "_x.npy")
    compiled = os.path.join(work, "footprint.ferry")
    code, _, err = run([ferry, "compile", model, "-o", compiled, "--device", "cpu", "--threads", "1"])
    if code != 0:
        sys.exit(f"FAIL: ferry compile exited {code}: {err}")

    # 1. No CUDA library in CPU-only commands.
    cpu_cmds = {"--version": [ferry, "--version"],
                "run (onnx)": [ferry, "run", model, "--input", f"x={x}", "--threads", "1", "--output-dir", work],
                "run (.ferry)": [ferry, "run", compiled, "--input", f"x={x}", "--threads", "1", "--output-dir", work]}
    for what, cmd in cpu_cmds.items():
        code, libs, text = loaded_libraries(cmd)
        if code != 0:
            problems.append(f"`ferry {what}` exited {code}: {text[-2000:]}")
            continue
        cuda = sorted(l for l in libs if CUDA_LIBS.search(l))
        if cuda:
            problems.append(f"`ferry {what}` on cpu loaded CUDA libraries: {cuda}")
        if not any("libdnnl" in l for l in libs):  # the trace must see the libraries ferry does load
            problems.append(f"`ferry {what}`: LD_DEBUG=files showed no libdnnl (saw {sorted(libs)[:8]}): the check is blind")
        report.append(f"{what}: {len(libs)} libraries loaded" + (f", CUDA's: {cuda}" if cuda else ", none of CUDA's"))
    module = os.path.join(os.path.dirname(ferry), "libferry_backend_cuda.so")
    if os.path.exists(module):
        code, libs, text = loaded_libraries([ferry, "run", model, "--input", f"x={x}", "--device", "cuda",
                                             "--output-dir", work])
        if not any("libferry_backend_cuda" in l for l in libs):
            problems.append(f"`ferry run --device cuda` did not load the cuda module (exit {code}): {sorted(libs)}")
        if code not in (0, 2):
            problems.append(f"`ferry run --device cuda` exited {code} (0 with a GPU, 2 with the reason without): {text[-2000:]}")
        report.append(f"run --device cuda: module loaded, exit {code}")

    # 2. Peak RSS.
    base = peak_rss([ferry, "--version"])
    report.append(f"ferry --version peak RSS {base / MiB:.1f} MiB (bound {VERSION_RSS_MAX / MiB:.0f})")
    if base > VERSION_RSS_MAX:
        problems.append(f"`ferry --version` peak RSS {base / MiB:.1f} MiB > {VERSION_RSS_MAX / MiB:.0f} MiB")
    for what in ("run (onnx)", "run (.ferry)"):
        rss = peak_rss(cpu_cmds[what])
        ratio = (rss - base) / weights
        report.append(f"ferry {what} peak RSS {rss / MiB:.1f} MiB = --version + {ratio:.2f} x the "
                      f"{weights / MiB:.0f} MiB of weights (bound {RUN_RSS_OVER_VERSION_MAX})")
        if ratio > RUN_RSS_OVER_VERSION_MAX:
            problems.append(f"`ferry {what}` holds {ratio:.2f} x its weights over `ferry --version` "
                            f"(> {RUN_RSS_OVER_VERSION_MAX})")

    # 3. .ferry size.
    size_ratio = os.path.getsize(compiled) / os.path.getsize(model)
    report.append(f".ferry {os.path.getsize(compiled) / MiB:.1f} MiB = {size_ratio:.2f} x the .onnx "
                  f"(bound {FERRY_OVER_ONNX_MAX})")
    if size_ratio > FERRY_OVER_ONNX_MAX:
        problems.append(f".ferry file {size_ratio:.2f} x its ONNX file (> {FERRY_OVER_ONNX_MAX})")

    # 4. `ferry info`'s memory rows.
    def info(path, *extra):
        code, out, err = run([ferry, "info", path, "--json", *extra])
        if code != 0:
            problems.append(f"`ferry info {path} {' '.join(extra)}` exited {code}: {err[-1000:]}")
            return None
        return json.loads(out)
    kinds = ("weights", "packed_weights", "arena", "other", "process")
    for path in (model, compiled):
        j = info(path)
        if j is None:
            continue
        st = j.get("weights_stored", {})
        if j.get("file_bytes") != os.path.getsize(path):
            problems.append(f"`ferry info {path}`: file_bytes {j.get('file_bytes')} != {os.path.getsize(path)}")
        if path == model and (st.get("plain_bytes") != weights or st.get("packed_only_count") != 0):
            problems.append(f"`ferry info` on the .onnx: weights stored {st}, expected {weights} plain bytes, none packed")
        if path == compiled and not (st.get("packed_only_count", 0) >= 1 and 0 < st.get("plain_bytes", 0) < weights
                                     and st.get("packed_only_bytes", 0) >= weights - st["plain_bytes"]):
            problems.append(f"`ferry info` on the .ferry: weights stored {st}: expected the convolutions' "
                            f"weights only packed, the rest of the {weights} bytes plain")
        r = info(path, "--resident", "--threads", "1")
        r = r.get("resident_bytes", {}) if r else {}
        if not all(isinstance(r.get(k), int) and r[k] >= 0 for k in kinds):
            problems.append(f"`ferry info {path} --resident`: resident_bytes {r}")
            continue
        report.append(f"info --resident {os.path.basename(path)}: " + ", ".join(f"{k} {r[k] / MiB:.1f}" for k in kinds) + " MiB")
        if r["weights"] + r["packed_weights"] + r["arena"] + r["other"] != r["process"] or r["other"] <= 0:
            problems.append(f"`ferry info {path} --resident`: the kinds do not add up to the process: {r}")
        if r["packed_weights"] <= 0 or r["arena"] <= 0 or not r["process"] <= r["peak_rss"]:
            problems.append(f"`ferry info {path} --resident`: packed weights, arena and peak expected: {r}")
        if path == model and r["weights"] > weights // 4:  # the MatMuls' 24 of 28 MiB held packed only
            problems.append(f"`ferry info {path} --resident`: {r['weights']} bytes of weights held beside "
                            f"their packed forms (the MatMuls' should be released)")
        if path == compiled and r["weights"] > st.get("plain_bytes", 0):
            problems.append(f"`ferry info {path} --resident`: weights {r['weights']} above the file's plain "
                            f"{st.get('plain_bytes')} bytes")
    code, out, _ = run([ferry, "info", model])
    if "weights:" not in out or "--resident" not in out:
        problems.append(f"`ferry info` text has no weights row pointing at --resident: {out}")

    print("\n".join(report))
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("check_footprint: ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The newcomer's messages (issue 41): argument mistakes get a did-you-mean over the command's own
options or the commands, every missing required option in one message, `ferry help CMD`, every
numeric option's default in --help, a failing compare verdict names each failed criterion with
its value and threshold (and an int8 model is judged against its output range), and names that
are not UTF-8 come out escaped in text, JSON and the HTML report.

usage: check_cli_messages.py FERRY DEMO_MODEL DEMO_INPUT WORKDIR"""
import json
import os
import re
import subprocess
import sys

FERRY, MODEL, INPUT, WORK = sys.argv[1:5]
os.makedirs(WORK, exist_ok=True)
failures = []


def run(*args, timeout=120):
    p = subprocess.run([FERRY, *map(str, args)], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")  # raises on invalid UTF-8


def expect(cond, what, detail=""):
    if not cond:
        failures.append(what + (("\n" + detail) if detail else ""))


def expect_error(args, rc_want, *needles):
    rc, out, err = run(*args)
    text = out + err
    expect(rc == rc_want, f"ferry {' '.join(map(str, args))}: exit {rc}, want {rc_want}", text)
    for n in needles:
        expect(n in text, f"ferry {' '.join(map(str, args))}: no {n!r} in its output", text)
    return text


# --- argument parsing -------------------------------------------------------------------------
train = ["train", MODEL, "--data", "d.npz", "--batch-size", "4", "--steps", "1"]
expect_error(train + ["--learning-rate", "0.01"], 2, "ferry train: unknown option --learning-rate; did you mean --lr?")
expect_error(["train", MODEL, "--data", "d.npz", "--batchsize", "16", "--steps", "1"], 2,
             "ferry train: unknown option --batchsize; did you mean --batch-size?")
expect_error(train + ["--batch_size", "4"], 2, "did you mean --batch-size?")
expect_error(train + ["--epoch", "2"], 2, "did you mean --epochs?")
t = expect_error(train + ["--learning-rate", "0.01", "--optimiser", "adam"], 2, "--learning-rate", "did you mean --optimizer?")
expect("not expected" not in t and "Run with --help" not in t, "CLI11's raw text leaks", t)
expect_error(["trian", MODEL], 2, "ferry: unknown command 'trian'; did you mean 'train'?")
expect_error(["compre", MODEL], 2, "did you mean 'compare'?")
t = expect_error(["train", MODEL], 2, "ferry train: missing", "--data", "--batch-size")
expect(t.count("\n") <= 3, "missing options in more than one message", t)
expect_error(["run"], 2, "ferry run: missing MODEL")
expect_error([], 2, "give a command", "train", "compare")
expect_error(["run", MODEL, "extra.npy"], 2, "ferry run: unexpected argument")
expect_error(["train", MODEL, "--data", "d.npz", "--batch-size", "0", "--steps", "1"], 2, "ferry train:", "--batch-size")

rc, help_text, _ = run("help", "train")
rc2, help2, _ = run("train", "--help")
expect(rc == 0 and help_text == help2 and "--batch-size" in help_text, "`ferry help train` is not `ferry train --help`", help_text)
rc, top, _ = run("help")
expect(rc == 0 and "train" in top and "compare" in top, "`ferry help` does not list the commands", top)
expect_error(["help", "trian"], 2, "did you mean 'train'?")

# Every command: an unknown option is named with the command; every numeric option shows its default.
commands = re.findall(r"^  ([a-z][a-z0-9-]*)\s", top.split("SUBCOMMANDS", 1)[-1], re.M)
expect(len(commands) >= 8, "too few commands found in `ferry help`", top)
for cmd in commands:
    args = [cmd, "--no-such-option"] if cmd in ("doctor", "ops") else [cmd, MODEL, "--no-such-option"]
    expect_error(args, 2, f"ferry {cmd}: unknown option --no-such-option")
    _, h, _ = run(cmd, "--help")
    entries = []
    for line in h.splitlines():
        if re.match(r"^\s{2,6}-", line):
            entries.append(line)
        elif entries and re.match(r"^\s{10,}\S", line):
            entries[-1] += " " + line.strip()
    for entry in entries:
        m = re.match(r"^\s+(-\S+(?:,\s*-\S+)*)\s+(INT|UINT|FLOAT|NUMBER)", entry)
        if m and "REQUIRED" not in entry and "default" not in entry:
            failures.append(f"ferry {cmd} --help: {m.group(1)} shows no default: {entry.strip()}")

t = expect_error(["train", "--help"], 0, "--image-size", "(default: sgd)", "0.01 for sgd")
expect(re.search(r"--image-size[^\n]*default: 224", t) is not None, "train --help: no --image-size default", t)

# --- compare's verdict --------------------------------------------------------------------------
rc, out, err = run("compare", MODEL, "--target", "cpu:fp16", "--input", INPUT, "--max-abs", "1e-9")
expect(rc == 2 and "result: FAIL" in out, "compare with --max-abs 1e-9 does not fail", out + err)
expect(re.search(r"output '[^']+' fails on sample '[^']+': max abs [0-9.e-]+ > 1e-09 \(--max-abs\)", out) is not None,
       "a failing verdict does not name max abs, its value and threshold", out)
rc, out, err = run("compare", MODEL, "--target", "cpu:fp16", "--input", INPUT, "--max-abs", "1e-9", "--json")
doc = json.loads(out)
ff = doc["outputs"][0].get("first_failure", {})
expect(any(f["criterion"] == "max_abs" and f["threshold"] == 1e-9 and f["value"] > 1e-9 for f in ff.get("failed", [])),
       "compare --json: no first_failure naming max_abs", out)
rc, out, err = run("compare", MODEL, "--target", "cpu:fp16", "--input", INPUT, "--cosine-min", "1.5")
expect(rc == 2 and re.search(r"cosine [0-9.]+ < 1.5 \(--cosine-min\)", out) is not None, "cosine criterion not named", out)

# An int8 model: judged on max abs against the reference's output range, by default.
q = os.path.join(WORK, "digits_int8.onnx")
rc, out, err = run("quantize", MODEL, "--out", q, "--calibration", INPUT, timeout=300)
expect(rc == 0 and os.path.exists(q), "ferry quantize failed", out + err)
if rc == 0:
    rc, out, err = run("compare", q, "--ref-model", MODEL, "--target", "cpu:fp32", "--input", INPUT)
    expect("max abs reported, not judged" in out, "int8 compare: the default max abs is judged", out)
    expect(rc == 0 and "result: PASS" in out, "a good int8 model fails compare by default", out + err)
    rc, out, err = run("compare", q, "--ref-model", MODEL, "--target", "cpu:fp32", "--input", INPUT, "--max-abs", "1e-9")
    expect(rc == 2 and "(--max-abs)" in out, "int8 compare: an explicit --max-abs is not used", out)

# --- names that are not UTF-8 -------------------------------------------------------------------
import onnx  # noqa: E402

m = onnx.load(MODEL)
relus = [n for n in m.graph.node if n.op_type == "Relu"]
expect(len(relus) >= 1, "demo model has no Relu node to rename")
relus[0].name = "rQlu"  # protobuf's Python refuses a str that is not UTF-8: put the byte in the file
data = m.SerializeToString().replace(b"rQlu", b"r\xf9lu")
bad = os.path.join(WORK, "bad_name.onnx")
open(bad, "wb").write(data)
rc, out, err = run("compare", bad, "--target", "cpu:fp16", "--input", INPUT, "--per-layer", "--json", "--max-abs", "1",
                   "--report", os.path.join(WORK, "bad.html"))
expect(rc == 0, f"compare --json on a non-UTF-8 node name: exit {rc}", err)
def strings(o):
    if isinstance(o, dict):
        return [x for v in list(o.keys()) + list(o.values()) for x in strings(v)]
    if isinstance(o, list):
        return [x for v in o for x in strings(v)]
    return [o] if isinstance(o, str) else []


expect(rc == 0 and any("r\\xF9lu" in x for x in strings(json.loads(out))), "the non-UTF-8 name is not escaped as \\xF9 in JSON", out[:2000])
html = open(os.path.join(WORK, "bad.html"), "rb").read() if os.path.exists(os.path.join(WORK, "bad.html")) else b""
expect(b"r\\xF9lu" in html and b"\xf9" not in html, "HTML report missing or not escaped")
rc, out, err = run("profile", bad, "--input", INPUT, "--json")
expect(rc == 0 and any("r\\xF9lu" in x for x in strings(json.loads(out))), f"profile --json on a non-UTF-8 node name: exit {rc}", err)
rc, out, err = run("info", bad)
expect(rc == 0, "info on a non-UTF-8 node name", err)
# An error message that quotes such a name is escaped too.
bad2 = os.path.join(WORK, "bad_op.onnx")
open(bad2, "wb").write(onnx.load(MODEL).SerializeToString().replace(b"Relu", b"R\xf9lu"))
rc, out, err = run("run", bad2, "--input", INPUT)
expect(rc == 2 and "R\\xF9lu" in err, "an error quoting a non-UTF-8 op type is not escaped", err)

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("ok")

#!/usr/bin/env python3
"""End-to-end checks of `ferry scan` (ctest `scan_cli`).

usage: check_scan.py FERRY FIXTURES_DIR WORK_DIR

1. Each fixture reports exactly the lines marked `# expect: RULE[, RULE]` (target ascend): no
   marked line missed, no unmarked line reported.
2. ferry's tokenizer agrees with CPython's tokenize on every NAME/NUMBER/STRING/OP/COMMENT token
   (type, text, start, end) of every fixture.
3. `--fix --out` for each target: every output parses with CPython's ast, and fixing the output
   again changes nothing (`--fix --diff` prints no diff).
4. Bad input (not UTF-8, not Python, too large) is skipped with a reason; .gitignore is honoured;
   SARIF output is well formed; --in-place keeps a backup; --fail-on sets the exit code.
"""
import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize

FERRY, FIXTURES, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def ferry(*args, expect_rc=0):
    p = subprocess.run([FERRY, "scan", *args], capture_output=True, text=True, timeout=60)
    check(p.returncode == expect_rc, f"ferry scan {' '.join(args)} exited {p.returncode}, wanted {expect_rc}: {p.stderr[-2000:]}")
    return p


def fixtures():
    return sorted(os.path.join(FIXTURES, f) for f in os.listdir(FIXTURES) if f.endswith(".py"))


def expected_lines(path):
    want = {}
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.search(r"# expect: ([\w.\-, ]+)$", line.rstrip("\n"))
        if m:
            want[i] = {r.strip() for r in m.group(1).split(",")}
    return want


def check_expectations():
    report = json.loads(ferry("--json", "--target", "ascend", *fixtures()).stdout)
    for path in fixtures():
        got = {}
        for f in report["findings"]:
            if os.path.samefile(f["file"], path):
                got.setdefault(f["line"], set()).add(f["rule"])
        want = expected_lines(path)
        name = os.path.basename(path)
        for line in sorted(set(want) | set(got)):
            check(want.get(line) == got.get(line),
                  f"{name}:{line}: expected {sorted(want.get(line, []))}, reported {sorted(got.get(line, []))}")
        print(f"{name}: {sum(len(v) for v in got.values())} findings on {len(got)} lines, {len(want)} lines expected")


KINDS = {"NAME", "NUMBER", "STRING", "OP", "COMMENT"}


def check_tokenizer():
    for path in fixtures():
        src = open(path, encoding="utf-8").read()
        ours = []
        for line in ferry("--dump-tokens", path).stdout.splitlines():
            kind, l, c, el, ec, text = line.split(" ", 5)
            if kind in KINDS:
                ours.append((kind, json.loads(text), (int(l), int(c)), (int(el), int(ec))))
        theirs = [(tokenize.tok_name[t.type], t.string, t.start, t.end)
                  for t in tokenize.generate_tokens(io.StringIO(src).readline) if tokenize.tok_name[t.type] in KINDS]
        first_diff = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        check(len(ours) == len(theirs) and first_diff is None,
              f"{os.path.basename(path)}: tokens differ from CPython's"
              + (f" at #{first_diff}: ours {ours[first_diff]} cpython {theirs[first_diff]}" if first_diff is not None
                 else f": {len(ours)} vs {len(theirs)} tokens"))
        print(f"{os.path.basename(path)}: {len(ours)} tokens agree with CPython's tokenize")


def check_fix_round_trip():
    for target in ("ascend", "generic", "cpu"):
        out = os.path.join(WORK, "fixed-" + target)
        shutil.rmtree(out, ignore_errors=True)
        report = json.loads(ferry("--json", "--target", target, "--fix", "--out", out, FIXTURES).stdout)
        check(report["summary"]["fixed"] > 0, f"{target}: --fix fixed nothing")
        for path in fixtures():
            fixed = os.path.join(out, os.path.basename(path))
            try:
                ast.parse(open(fixed, encoding="utf-8").read(), fixed)
            except SyntaxError as e:
                check(False, f"{target}: {fixed} does not parse: {e}")
        # The unified diff applies (git apply) and gives the same files as --out.
        copy = os.path.join(WORK, "patched-" + target)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(FIXTURES, copy)
        diff = subprocess.run([FERRY, "scan", "--target", target, "--fix", "--diff", "."], cwd=FIXTURES,
                              capture_output=True, text=True, timeout=60).stdout
        p = subprocess.run(["git", "apply", "-p1", "-"], cwd=copy, input=diff, capture_output=True, text=True)
        check(p.returncode == 0, f"{target}: the --diff output does not apply: {p.stdout}{p.stderr}")
        for path in fixtures():
            name = os.path.basename(path)
            check(open(os.path.join(copy, name)).read() == open(os.path.join(out, name)).read(),
                  f"{target}: {name}: --diff and --out disagree")
        if target == "cpu":
            # A finding on an argument of a call spread over lines: --fix edits that argument's line.
            src = open(os.path.join(FIXTURES, "imagenet_train.py"), encoding="utf-8").read().splitlines()
            dst = open(os.path.join(out, "imagenet_train.py"), encoding="utf-8").read().splitlines()
            own = [l for l in src if l.strip().startswith("pin_memory=True,")]
            check(len(own) == 1 and own[0].replace("True", "False") in dst and not any("pin_memory=True" in l for l in dst),
                  "cpu: --fix did not turn the own-line `pin_memory=True,` argument into False")
        again = ferry("--target", target, "--fix", "--diff", out)
        check(again.stdout == "", f"{target}: fixing twice changes the files:\n{again.stdout[:3000]}")
        print(f"{target}: {report['summary']['fixed']} findings fixed, {report['summary']['hand_work']} left by hand; "
              "output parses, second --fix changes nothing")


def check_bad_input_and_outputs():
    bad = os.path.join(WORK, "tree")
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(os.path.join(bad, "ignored_dir"))
    os.makedirs(os.path.join(bad, "pkg"))
    open(os.path.join(bad, "not_utf8.py"), "wb").write(b"x = '\xff\xfe'\n")
    open(os.path.join(bad, "broken.py"), "w").write("def f(:\n    x = (1,\n")
    open(os.path.join(bad, "huge.py"), "w").write("x = 1\n" * 1000)
    open(os.path.join(bad, "pkg", "good.py"), "w").write("import torch\nx = torch.ones(1).cuda()\n")
    open(os.path.join(bad, "pkg", "skip_me.py"), "w").write("import torch\ntorch.cuda.synchronize()\n")
    open(os.path.join(bad, "ignored_dir", "x.py"), "w").write("import torch\nx = torch.ones(1).cuda()\n")
    open(os.path.join(bad, ".gitignore"), "w").write("ignored_dir/\npkg/skip_*.py\n")
    sarif = os.path.join(WORK, "tree.sarif")
    report = json.loads(ferry("--json", "--max-file-size", "1000", "--sarif", sarif, bad).stdout)
    reasons = {os.path.basename(s["file"]): s["reason"] for s in report["skipped"]}
    check(reasons.get("not_utf8.py", "").startswith("not UTF-8"), f"not_utf8.py: {reasons.get('not_utf8.py')}")
    check(reasons.get("broken.py", "").startswith("does not parse"), f"broken.py: {reasons.get('broken.py')}")
    check(reasons.get("huge.py", "").startswith("too large"), f"huge.py: {reasons.get('huge.py')}")
    files = {os.path.relpath(f["file"], bad) for f in report["findings"]}
    check(files == {os.path.join("pkg", "good.py")}, f"scanned files with findings: {files} (.gitignore not honoured?)")
    s = json.load(open(sarif))
    check(s["version"] == "2.1.0" and len(s["runs"][0]["results"]) == len(report["findings"]), "SARIF report malformed")
    ferry("--fail-on", "breaks", os.path.join(bad, "pkg"), expect_rc=2)
    ferry("--fail-on", "breaks", os.path.join(bad, "huge.py"))
    # --in-place keeps the original as FILE.orig
    inplace = os.path.join(WORK, "inplace")
    shutil.rmtree(inplace, ignore_errors=True)
    os.makedirs(inplace)
    target = os.path.join(inplace, "train.py")
    shutil.copy(os.path.join(FIXTURES, "imagenet_train.py"), target)
    ferry("--fix", "--in-place", target)
    check(open(target + ".orig").read() == open(os.path.join(FIXTURES, "imagenet_train.py")).read(), "backup differs from original")
    check("import torch_npu\n" in open(target).read(), "--in-place did not rewrite the file")
    ferry("--fix", inplace, expect_rc=2)  # --fix needs a destination
    ferry(os.path.join(WORK, "does-not-exist"), expect_rc=2)
    print("bad input skipped with reasons; .gitignore honoured; SARIF, --in-place, --fail-on ok")


os.makedirs(WORK, exist_ok=True)
check_expectations()
check_tokenizer()
check_fix_round_trip()
check_bad_input_and_outputs()
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all scan checks passed")

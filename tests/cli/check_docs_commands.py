#!/usr/bin/env python3
"""Every `ferry ...` command line in README.md and docs/*.md names a command ferry has and only
options that command accepts (read from `ferry CMD --help`), so the guides cannot offer a flag
that no command takes (issue 41).

usage: check_docs_commands.py FERRY REPO_ROOT"""
import glob
import os
import re
import shlex
import subprocess
import sys

FERRY, ROOT = sys.argv[1], sys.argv[2]


def run(*args):
    p = subprocess.run([FERRY, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def commands():
    rc, out = run("--help")
    assert rc == 0, out
    names, in_list = [], False
    for line in out.splitlines():
        if line.startswith("SUBCOMMANDS") or line.startswith("Subcommands"):
            in_list = True
            continue
        m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
        if in_list and m:
            names.append(m.group(1))
    assert names, "no commands in ferry --help:\n" + out
    return names


def options_of(cmd):
    rc, out = run(cmd, "--help")
    assert rc == 0, out
    opts = set()
    for line in out.splitlines():
        m = re.match(r"^\s+(-[^\s]+(?:,\s*-[^\s]+)*)", line)
        if not m:
            continue
        for o in m.group(1).split(","):
            opts.add(o.strip())
    assert "--help" in opts, out
    return opts


# Lines of fenced code blocks and inline code spans that run ferry ($ prompts, build/ferry, ./ferry).
FERRY_AT = re.compile(r"(?:^|[\s`(])(?:\$\s+)?(?:\.?/?(?:[\w.-]+/)*)?ferry\s+([a-z][a-z0-9-]*)(.*)$")


def command_lines(path):
    text = open(path, encoding="utf-8").read()
    lines, fenced = [], False
    raw = text.splitlines()
    i = 0
    while i < len(raw):
        line = raw[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        if fenced:
            full, lineno = line, i + 1
            while full.rstrip().endswith("\\") and i + 1 < len(raw):
                i += 1
                full = full.rstrip()[:-1] + " " + raw[i].strip()
            lines.append((lineno, full))
        else:
            for span in re.findall(r"`([^`]+)`", line):
                lines.append((i + 1, span))
        i += 1
    return lines


def main():
    known = commands()
    option_cache = {}
    problems, checked = [], 0
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for path in files:
        rel = os.path.relpath(path, ROOT)
        for lineno, line in command_lines(path):
            m = FERRY_AT.search(line)
            if not m:
                continue
            cmd, rest = m.group(1), m.group(2)
            if cmd in ("help",):
                continue
            if cmd not in known and run(cmd, "--help")[0] == 0:
                known.append(cmd)  # a hidden command (ferry switches): not listed, but real
            if cmd not in known:
                # prose such as "ferry is ..." or "ferry and ..." inside a code span is not a command
                if re.search(r"\s-", rest) or line.strip().startswith(("ferry", "$", "./", "build/")):
                    problems.append(f"{rel}:{lineno}: 'ferry {cmd}': no such command (ferry has {', '.join(known)})")
                continue
            if cmd not in option_cache:
                option_cache[cmd] = options_of(cmd)
            # stop at shell plumbing: pipes, redirections, && and comments
            rest = re.split(r"\s(?:\||&&|;|>|2>|#)\s?", rest)[0]
            try:
                tokens = shlex.split(rest, comments=False)
            except ValueError:
                tokens = rest.split()
            checked += 1
            for tok in tokens:
                if not tok.startswith("-") or re.fullmatch(r"-[0-9.e+-]+", tok) or tok in ("-", "--"):
                    continue
                flag = tok.split("=", 1)[0]
                if re.fullmatch(r"-[A-Za-z][0-9]+", flag):  # -O2, -t4
                    flag = flag[:2]
                if flag.endswith(("...", "…")) or not re.fullmatch(r"--?[A-Za-z][\w-]*", flag):
                    continue
                if flag not in option_cache[cmd]:
                    problems.append(f"{rel}:{lineno}: 'ferry {cmd} {flag}': ferry {cmd} has no option {flag}")
    print(f"checked {checked} ferry command lines in {len(files)} files")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    assert checked >= 20, "too few command lines found: the extraction is broken"


if __name__ == "__main__":
    main()

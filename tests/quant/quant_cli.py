"""Shared by the tests/quant checks: run the ferry CLI, check a condition, name a work file.

    import quant_cli
    from quant_cli import check, ferry, w
    quant_cli.setup(sys.argv[1], sys.argv[2])   # FERRY, WORKDIR
"""
import os
import subprocess
import sys

FERRY = None
WORK = None


def setup(ferry_bin, work):
    global FERRY, WORK
    FERRY, WORK = ferry_bin, work
    os.makedirs(WORK, exist_ok=True)


def ferry(*args, expect=0):
    """Runs `ferry ARGS`; fails the check unless it exits `expect` (None: any exit)."""
    cmd = [FERRY] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if expect is not None and p.returncode != expect:
        sys.exit("FAIL: %s\nexit %d (expected %d)\nstdout:\n%s\nstderr:\n%s" %
                 (" ".join(cmd), p.returncode, expect, p.stdout[-4000:], p.stderr[-4000:]))
    return p


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def w(name):
    return os.path.join(WORK, name)

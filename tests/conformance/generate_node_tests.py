#!/usr/bin/python3
"""Generates the ONNX backend node tests (onnx 1.12, Debian's python3-onnx) into OUT_DIR.

onnx 1.12's generators use numpy aliases that numpy 1.24 removed (np.float, np.object, np.bool,
np.int); they are re-added as the plain Python types they always aliased, which changes no value.
Usage: generate_node_tests.py OUT_DIR
"""
import os
import sys

import numpy as np

for alias, typ in (("float", float), ("object", object), ("bool", bool), ("int", int)):
    if alias not in np.__dict__:
        setattr(np, alias, typ)

from onnx.backend.test.cmd_tools import main  # noqa: E402

if __name__ == "__main__":
    out = sys.argv[1]
    stamp = os.path.join(out, ".generated")
    if os.path.exists(stamp):
        print(f"{out}: already generated")
        sys.exit(0)
    sys.argv = [sys.argv[0], "generate-data", "-o", out]
    main()
    open(stamp, "w").write("ok\n")
    n = len(os.listdir(os.path.join(out, "node")))
    print(f"generated {n} node tests into {out}/node")

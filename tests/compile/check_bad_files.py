#!/usr/bin/env python3
"""Corrupted, truncated and foreign .ferry files fail cleanly: `ferry run`, `ferry info` and the
C example (examples/classify.c) exit 2 with a message that says what is wrong. Never a crash.

usage: check_bad_files.py FERRY CLASSIFY SOURCE_DIR WORK_DIR
"""
import os
import struct
import subprocess
import sys

FERRY, CLASSIFY, SRC, WORK = sys.argv[1:5]
os.makedirs(WORK, exist_ok=True)
model = os.path.join(SRC, "demo", "digits_cnn.onnx")
sample = os.path.join(SRC, "demo", "samples", "digit_0_label3.npy")
good = os.path.join(WORK, "good.ferry")
subprocess.run([FERRY, "compile", model, "-o", good, "--input-shape", "image:1,1,28,28"], check=True,
               stdout=subprocess.DEVNULL)
data = open(good, "rb").read()
hdr = {"version": 8, "file_size": 16, "weights_offset": 40, "isa": 64, "ferry_version": 80}


def patched(offset, raw):
    b = bytearray(data)
    b[offset:offset + len(raw)] = raw
    return bytes(b)


weights_offset = struct.unpack_from("<Q", data, hdr["weights_offset"])[0]
cases = {
    # name: (bytes, expected text in the message)
    "flipped_weight_byte": (patched(weights_offset + 100, bytes([data[weights_offset + 100] ^ 0x40])), "checksum mismatch"),
    "flipped_graph_byte": (patched(200, bytes([data[200] ^ 0x01])), "checksum mismatch"),
    "truncated_half": (data[: len(data) // 2], "truncated"),
    "truncated_header": (data[:60], "truncated"),
    "trailing_garbage": (data + b"\0" * 64, "unexpected bytes"),
    "other_format_version": (patched(hdr["version"], struct.pack("<I", 99)), "format version 99"),
    "other_isa": (patched(hdr["isa"], b"riscv64\0\0\0\0\0\0\0\0\0"), "compiled for ISA 'riscv64'"),
    "other_ferry_version": (patched(hdr["ferry_version"], b"9.9.9\0\0\0\0\0\0\0\0\0\0\0"), "compiled by ferry 9.9.9"),
    "not_a_ferry_file": (b"hello, this is not a model at all" * 4, "not a compiled ferry model"),
    "empty": (b"", "not a compiled ferry model"),
}
failures = 0
for name, (content, expected) in cases.items():
    path = os.path.join(WORK, name + ".ferry")
    with open(path, "wb") as f:
        f.write(content)
    for argv in ([FERRY, "run", path, "--input", sample], [FERRY, "info", path], [CLASSIFY, path, sample]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        tool = os.path.basename(argv[0]) + (" " + argv[1] if argv[0] == FERRY else "")
        if p.returncode != 2 or expected not in p.stderr:
            failures += 1
            print(f"FAIL {name} ({tool}): exit {p.returncode}, stderr: {p.stderr.strip()[:300]}")
        else:
            print(f"ok   {name} ({tool}): {p.stderr.strip().splitlines()[-1][:140]}")
sys.exit(1 if failures else 0)

#!/usr/bin/python3
"""Models made of many tiny nodes, to time the executor's cost per node rather than the kernels'
(issue 22, engineer B): 200 Adds on [1, 64] and 200 convolutions (depthwise 3x3 and 1x1 in turn) on a
1x16x8x8 image, where oneDNN's per-call cost dominates. Fixed shapes: bench them without -b.

    bench/node_chain_models.py /tmp/chains
    build/ferry bench /tmp/chains/add_chain.onnx -t 1 --duration 2 --json      # cpu_ms: / 200 per node
    build/ferry bench /tmp/chains/conv_chain.onnx -t 1 --duration 2 --json

Measured (session 15, load 3.5-4.3, cpu_ms min, median of 8 interleaved rounds): add_chain 0.036-0.041
ms (180-205 ns per node, the kernel included), conv_chain 0.214 ms (1.07 us per node); a bare oneDNN
execute of such a 1x1 convolution alone took 1.0-2.3 us per call in a standalone loop under the same load.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = 200


def save(nodes, inits, inp, out, path):
    g = helper.make_graph(nodes, os.path.basename(path), [inp], [out], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/chains"
    os.makedirs(out_dir, exist_ok=True)
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("Add", [f"x{i}", "c"], [f"x{i + 1}"]) for i in range(N)]
    save(nodes, [numpy_helper.from_array(np.ones((1, 64), np.float32), "c")],
         helper.make_tensor_value_info("x0", f32, [1, 64]), helper.make_tensor_value_info(f"x{N}", f32, [1, 64]),
         os.path.join(out_dir, "add_chain.onnx"))
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    for i in range(N):
        if i % 2 == 0:
            w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3
            nodes.append(helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"x{i + 1}"], group=16, pads=[1, 1, 1, 1]))
        else:
            w = rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.25
            nodes.append(helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"x{i + 1}"]))
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(16, np.float32), f"b{i}")]
    save(nodes, inits, helper.make_tensor_value_info("x0", f32, [1, 16, 8, 8]),
         helper.make_tensor_value_info(f"x{N}", f32, [1, 16, 8, 8]), os.path.join(out_dir, "conv_chain.onnx"))
    print(f"wrote {out_dir}/add_chain.onnx and {out_dir}/conv_chain.onnx")


if __name__ == "__main__":
    main()

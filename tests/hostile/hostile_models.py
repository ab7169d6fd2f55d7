#!/usr/bin/python3
"""Generates hostile and malformed inputs for ferry and checks that each one is refused cleanly:
exit code 2, a message naming the problem, no crash, no hang (60 s), peak memory under 2 GiB,
nothing read outside the model folder.

Usage: hostile_models.py FERRY WORKDIR
"""
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_model(opset=13, dims=(1, 3, 4, 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    g = helper.make_graph([node], "tiny", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="hostile-test")


def model_with(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def save(model, path):
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def external_model(d, location, offset=0, length=None, data_bytes=16 * 4):
    """A model whose Add constant lives in external data at `location`."""
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([16])
    w.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = w.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add_w")
    return model_with([node], [vi("x", [16])], [vi("y", [16])], [w])


def build_cases(work):
    cases = []  # (name, argv-after-ferry, expected exit, [substrings in stderr])

    def case(name, args, code, *needles):
        cases.append((name, args, code, list(needles)))

    good = os.path.join(work, "good.onnx")
    save(tiny_model(), good)
    x_ok = os.path.join(work, "x_ok.npy")
    np.save(x_ok, np.ones((1, 3, 4, 4), np.float32))
    case("good_model_runs", ["run", good, "--input", x_ok], 0)

    raw = tiny_model().SerializeToString()
    p = os.path.join(work, "truncated.onnx")
    open(p, "wb").write(raw[: len(raw) // 2])
    case("truncated", ["info", p], 2, "not a valid ONNX model")
    p = os.path.join(work, "random.onnx")
    open(p, "wb").write(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    case("random_bytes", ["info", p], 2, "random.onnx")
    p = os.path.join(work, "text.onnx")
    open(p, "w").write("this is not a model\n" * 10)
    case("text_file", ["info", p], 2, "text.onnx")
    p = os.path.join(work, "empty.onnx")
    open(p, "wb").close()
    case("empty_file", ["info", p], 2, "empty")
    case("missing_file", ["info", os.path.join(work, "nope.onnx")], 2, "does not exist")
    case("folder_as_model", ["info", work], 2, "not a regular file")

    m = model_with([helper.make_node("FancyOp", ["x"], ["y"], name="fancy_1")], [vi("x", [2])], [vi("y", [2])])
    p = os.path.join(work, "unknown_op.onnx"); save(m, p)
    case("unknown_op", ["run", p], 2, "fancy_1", "FancyOp", "opset 13")

    m = model_with([helper.make_node("Relu", ["b"], ["a"], name="n_a"), helper.make_node("Relu", ["a"], ["b"], name="n_b")],
                   [vi("x", [2])], [vi("a", [2])])
    p = os.path.join(work, "cyclic.onnx"); save(m, p)
    case("cyclic", ["info", p], 2, "cycle")

    m = model_with([helper.make_node("Relu", ["ghost"], ["y"], name="reads_ghost")], [vi("x", [2])], [vi("y", [2])])
    p = os.path.join(work, "dangling.onnx"); save(m, p)
    case("dangling_edge", ["info", p], 2, "reads_ghost", "ghost", "dangling")

    m = model_with([helper.make_node("Relu", ["x"], ["y"], name="r1"), helper.make_node("Relu", ["x"], ["y"], name="r2")],
                   [vi("x", [2])], [vi("y", [2])])
    p = os.path.join(work, "dup_output.onnx"); save(m, p)
    case("duplicate_producer", ["info", p], 2, "'y'", "r1", "r2")

    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20, 1 << 10], np.int64), "shape")
    m = model_with([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="giant")], [vi("x", [2])],
                   [vi("y", None)], [shape])
    p = os.path.join(work, "absurd_dims.onnx"); save(m, p)
    case("absurd_output_dims", ["info", p], 2, "giant")

    big = TensorProto(); big.name = "big"; big.data_type = TensorProto.FLOAT; big.dims.extend([1 << 40])
    m = model_with([helper.make_node("Add", ["x", "big"], ["y"], name="add_big")], [vi("x", [1])], [vi("y", [1])], [big])
    p = os.path.join(work, "declared_2_40.onnx"); save(m, p)
    case("initializer_2_pow_40_elements", ["info", p], 2, "big", "2^36")

    neg = TensorProto(); neg.name = "neg"; neg.data_type = TensorProto.FLOAT; neg.dims.extend([-1, 3])
    m = model_with([helper.make_node("Add", ["x", "neg"], ["y"], name="add_neg")], [vi("x", [3])], [vi("y", [3])], [neg])
    p = os.path.join(work, "negative_dim.onnx"); save(m, p)
    case("negative_initializer_dim", ["info", p], 2, "neg", "negative")

    m = model_with([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [-5, 3])], [vi("y", [3])])
    p = os.path.join(work, "negative_input_dim.onnx"); save(m, p)
    case("negative_input_dim", ["info", p], 2, "negative")

    short = TensorProto(); short.name = "w"; short.data_type = TensorProto.FLOAT; short.dims.extend([10])
    short.raw_data = b"\0" * 12
    m = model_with([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [vi("x", [10])], [vi("y", [10])], [short])
    p = os.path.join(work, "init_short.onnx"); save(m, p)
    case("initializer_bytes_disagree", ["info", p], 2, "'w'", "12 bytes", "40")

    fd = TensorProto(); fd.name = "w"; fd.data_type = TensorProto.FLOAT; fd.dims.extend([4]); fd.float_data.extend([1, 2])
    m = model_with([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [vi("x", [4])], [vi("y", [4])], [fd])
    p = os.path.join(work, "init_float_data_short.onnx"); save(m, p)
    case("initializer_float_data_short", ["info", p], 2, "'w'", "float_data")

    # Opsets 1-6 are upgraded at import (issue 23); 0 is no opset at all.
    p = os.path.join(work, "old_opset.onnx"); save(tiny_model(opset=3), p)
    case("old_opset_upgraded", ["run", p, "--input", x_ok], 0)
    p = os.path.join(work, "opset_zero.onnx"); save(tiny_model(opset=0), p)
    case("opset_too_old", ["run", p, "--input", x_ok], 2, "opset 0")
    m = model_with([helper.make_node("NoSuchOldOp", ["x"], ["y"], name="odd_3")], [vi("x", [2])], [vi("y", [2])], opset=3)
    p = os.path.join(work, "old_opset_unknown_op.onnx"); save(m, p)
    case("old_opset_unknown_op", ["run", p], 2, "odd_3", "NoSuchOldOp", "opset 3")
    p = os.path.join(work, "new_opset.onnx"); save(tiny_model(opset=99), p)
    case("opset_too_new", ["info", p], 2, "opset 99")

    m = model_with([helper.make_node("Relu", ["x", "x"], ["y"], name="relu_two")], [vi("x", [2])], [vi("y", [2])])
    p = os.path.join(work, "relu_two_inputs.onnx"); save(m, p)
    case("wrong_input_count", ["info", p], 2, "relu_two", "2 inputs")

    m = model_with([helper.make_node("Add", ["x", "z"], ["y"], name="add_bad")], [vi("x", [2, 3]), vi("z", [4])],
                   [vi("y", None)])
    p = os.path.join(work, "bad_broadcast.onnx"); save(m, p)
    case("incompatible_broadcast", ["info", p], 2, "add_bad", "broadcast")

    # Inputs that disagree with the model.
    for name, arr, needles in [
        ("input_wrong_shape", np.ones((1, 3, 5, 5), np.float32), ["'x'", "[1,3,4,4]", "[1,3,5,5]"]),
        ("input_wrong_rank", np.ones((3,), np.float32), ["'x'", "rank"]),
        ("input_wrong_dtype", np.ones((1, 3, 4, 4), np.int64), ["'x'", "i64", "f32"]),
    ]:
        f = os.path.join(work, name + ".npy")
        np.save(f, arr)
        case(name, ["run", good, "--input", f], 2, *needles)
    case("input_unknown_name", ["run", good, "--input", "nope=" + x_ok], 2, "nope")
    case("input_missing", ["run", good], 2, "'x'", "not given")
    case("input_file_missing", ["run", good, "--input", os.path.join(work, "nope.npy")], 2, "nope.npy")
    p = os.path.join(work, "bad.npy"); open(p, "wb").write(b"\x93NUMPY\x01\x00garbage")
    case("input_npy_corrupt", ["run", good, "--input", p], 2, "bad.npy")
    p = os.path.join(work, "trunc.npy"); np.save(p, np.ones((1, 3, 4, 4), np.float32))
    data = open(p, "rb").read(); open(p, "wb").write(data[:-20])
    case("input_npy_truncated", ["run", good, "--input", p], 2, "trunc.npy")
    case("input_unknown_extension", ["run", good, "--input", good], 2, "unknown format")
    case("bad_option", ["run", good, "--no-such-flag"], 2)
    case("unknown_device", ["run", good, "--input", x_ok, "--device", "tpu"], 2, "tpu")

    # External data: only files inside the model's folder.
    ext = os.path.join(work, "ext")
    os.makedirs(ext, exist_ok=True)
    weights = np.arange(16, dtype=np.float32)
    open(os.path.join(ext, "weights.bin"), "wb").write(b"PAD!" + weights.tobytes())
    outside = os.path.join(work, "outside.bin")
    open(outside, "wb").write(weights.tobytes())
    link = os.path.join(ext, "link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(outside, link)
    x16 = os.path.join(work, "x16.npy"); np.save(x16, np.ones(16, np.float32))
    p = os.path.join(ext, "ok.onnx"); save(external_model(ext, "weights.bin", offset=4, length=64), p)
    case("external_ok", ["run", p, "--input", x16], 0)
    # Weights past the 2 GiB mark of a (sparse) external file: 64-bit offsets work.
    big = os.path.join(ext, "big_weights.bin")
    with open(big, "wb") as f:
        f.truncate(3 << 30)
        f.seek(3 << 30)
        f.write(weights.tobytes())
    p = os.path.join(ext, "big_offset.onnx"); save(external_model(ext, "big_weights.bin", offset=3 << 30, length=64), p)
    case("external_offset_past_2GiB", ["run", p, "--input", x16, "--top-k", "1"], 0)
    p = os.path.join(ext, "dotdot.onnx"); save(external_model(ext, "../outside.bin"), p)
    case("external_dotdot", ["info", p], 2, "..")
    p = os.path.join(ext, "abs.onnx"); save(external_model(ext, outside), p)
    case("external_absolute", ["info", p], 2, "absolute")
    p = os.path.join(ext, "link.onnx"); save(external_model(ext, "link.bin"), p)
    case("external_symlink_outside", ["info", p], 2, "outside")
    p = os.path.join(ext, "past_end.onnx"); save(external_model(ext, "weights.bin", offset=40, length=64), p)
    case("external_length_past_end", ["info", p], 2, "past the end")
    p = os.path.join(ext, "offset_past.onnx"); save(external_model(ext, "weights.bin", offset=10**12, length=64), p)
    case("external_offset_past_end", ["info", p], 2, "past the end")
    p = os.path.join(ext, "missing.onnx"); save(external_model(ext, "nothere.bin"), p)
    case("external_missing_file", ["info", p], 2, "nothere.bin")
    p = os.path.join(ext, "wrong_len.onnx"); save(external_model(ext, "weights.bin", offset=4, length=32), p)
    case("external_wrong_length", ["info", p], 2, "32 bytes")

    # Dimension products that overflow int64 (each dim is legal, the product is not).
    ovf = TensorProto(); ovf.name = "ovf"; ovf.data_type = TensorProto.FLOAT; ovf.dims.extend([1 << 32, 1 << 32, 1 << 8])
    m = model_with([helper.make_node("Add", ["x", "ovf"], ["y"], name="add_ovf")], [vi("x", [1])], [vi("y", [1])], [ovf])
    p = os.path.join(work, "dims_overflow.onnx"); save(m, p)
    case("initializer_dims_overflow_int64", ["info", p], 2, "ovf")
    m = model_with([helper.make_node("Relu", ["x"], ["y"], name="relu_huge")], [vi("x", [1 << 31, 1 << 31, 1 << 31])],
                   [vi("y", None)])
    p = os.path.join(work, "input_dims_overflow.onnx"); save(m, p)
    case("input_dims_overflow_int64", ["run", p, "--input", x_ok], 2, "relu_huge", "2^36")

    # A giant declared input: refused when an input of that size is given, never allocated blindly.
    m = model_with([helper.make_node("Relu", ["x"], ["y"], name="relu_giant")], [vi("x", [1 << 20, 1 << 20])],
                   [vi("y", [1 << 20, 1 << 20])])
    p = os.path.join(work, "giant_input.onnx"); save(m, p)
    case("giant_declared_input", ["run", p, "--input", x_ok], 2, "relu_giant", "2^36")

    # If nested 40 deep (limit 32).
    def nested_if(depth):
        if depth == 0:
            return helper.make_graph([helper.make_node("Identity", ["x"], ["o0"], name="leaf")], "leaf", [], [vi("o0", [2])])
        inner = nested_if(depth - 1)  # then: one level deeper; else: a leaf (keeps the file linear in depth)
        leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["e%d" % depth])], "e%d" % depth, [],
                                 [vi("e%d" % depth, [2])])
        node = helper.make_node("If", ["c"], ["o%d" % depth], name="if_%d" % depth, then_branch=inner, else_branch=leaf)
        return helper.make_graph([node], "g%d" % depth, [], [vi("o%d" % depth, [2])])
    body = nested_if(40)
    top = helper.make_graph(list(body.node), "top", [vi("x", [2]), vi("c", [], TensorProto.BOOL)], [vi("o40", [2])])
    p = os.path.join(work, "nested_if.onnx"); save(helper.make_model(top, opset_imports=[helper.make_opsetid("", 13)]), p)
    case("if_nested_40_deep", ["info", p], 2, "nest")

    # Attributes of the wrong type.
    n = helper.make_node("Transpose", ["x"], ["y"], name="tr_bad")
    n.attribute.append(helper.make_attribute("perm", "0,1"))  # a string where ints are expected
    m = model_with([n], [vi("x", [2, 3])], [vi("y", None)])
    p = os.path.join(work, "attr_wrong_type.onnx"); save(m, p)
    case("attribute_wrong_type", ["info", p], 2, "tr_bad", "perm")
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_bad", kernel_shape=[3, 3], strides=[0, 0])
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    m = model_with([n], [vi("x", [1, 1, 8, 8])], [vi("y", None)], [w])
    p = os.path.join(work, "conv_zero_stride.onnx"); save(m, p)
    case("conv_zero_stride", ["info", p], 2, "conv_bad", "stride")

    # The same name listed twice as a graph output; a node writing one value twice.
    m = model_with([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2]), vi("y", [2])])
    p = os.path.join(work, "dup_graph_output.onnx"); save(m, p)
    case("duplicate_graph_output", ["info", p], 2, "'y'")
    m = model_with([helper.make_node("Split", ["x"], ["y", "y"], name="split_dup", axis=0)], [vi("x", [4])], [vi("y", [2])])
    p = os.path.join(work, "dup_node_output.onnx"); save(m, p)
    case("node_writes_value_twice", ["info", p], 2, "'y'")

    # --memory-limit: the need, the limit, the dominating tensor and the largest batch that fits.
    n1 = helper.make_node("MatMul", ["x", "w"], ["h"], name="widen")
    n2 = helper.make_node("ReduceSum", ["h"], ["y"], name="sum", keepdims=0)
    w = numpy_helper.from_array(np.ones((64, 4096), np.float32), "w")
    m = model_with([n1, n2], [vi("x", ["batch", 64])], [vi("y", None)], [w])
    p = os.path.join(work, "memory_hungry.onnx"); save(m, p)
    x32 = os.path.join(work, "x_batch32.npy"); np.save(x32, np.ones((32, 64), np.float32))
    # weights 1 MiB + input 8 KiB + h (32 x 4096 x 4 = 512 KiB): 1.6 MiB needed; 1.3 MiB leaves 307 KiB for 16.3 KiB per sample: batch 18.
    case("memory_limit_exceeded", ["run", p, "--input", x32, "--memory-limit", "1.3M"], 2,
         "memory limit is 1.3 MiB", "'h'", "largest batch that fits is 18")
    case("memory_limit_fits", ["run", p, "--input", x32, "--memory-limit", "2M"], 0)
    case("memory_limit_bad_unit", ["run", p, "--input", x32, "--memory-limit", "2X"], 2, "--memory-limit", "unit")

    # Input tensors (.pb) found by fuzzing: a few bytes declaring 2^31 floats without data must not
    # allocate them; a 0 beside huge dims is an empty tensor whose element count must not overflow.
    t = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[1 << 15, 1 << 16])
    p = os.path.join(work, "huge_shape_no_data.pb"); open(p, "wb").write(t.SerializeToString())
    case("pb_huge_shape_without_data", ["run", good, "--input", p], 2, "float_data holds 0 values")
    t = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[0, 1 << 62, 1 << 62])
    p = os.path.join(work, "zero_beside_huge.pb"); open(p, "wb").write(t.SerializeToString())
    case("pb_zero_dim_beside_huge_dims", ["run", good, "--input", p], 2, "input 'x'", "[0,")
    return cases


# Every case must finish within these bounds (a hostile file must not be a way to exhaust the machine).
TIMEOUT_S = 60
MAX_RSS_MIB = 2048


def run_bounded(argv):
    """Runs argv; returns (exit code or None when killed for time, stderr text, peak RSS in MiB)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timed_out = not timer.is_alive()
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return (None if timed_out else proc.returncode), text, usage.ru_maxrss / 1024.0


def main():
    ferry, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    cases = build_cases(work)
    failed = 0
    for name, args, want, needles in cases:
        code, stderr, rss_mib = run_bounded([ferry] + args)
        if code is None:
            print(f"FAIL {name}: hung (over {TIMEOUT_S} s)")
            failed += 1
            continue
        problems = []
        if code != want:
            problems.append(f"exit {code}, expected {want}")
        if code < 0:
            problems.append(f"killed by signal {-code}")
        if rss_mib > MAX_RSS_MIB:
            problems.append(f"peak memory {rss_mib:.0f} MiB, over the bound of {MAX_RSS_MIB} MiB")
        for n in needles:
            if n not in stderr:
                problems.append(f"stderr lacks {n!r}")
        if want != 0 and not stderr.strip():
            problems.append("no message on stderr")
        if problems:
            failed += 1
            print(f"FAIL {name}: {'; '.join(problems)}\n     stderr: {stderr.strip()[:400]}")
        else:
            first = stderr.strip().splitlines()[0] if stderr.strip() else "(ok)"
            print(f"ok   {name} ({rss_mib:.0f} MiB): {first[:150]}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

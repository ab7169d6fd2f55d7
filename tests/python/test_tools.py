# ferry's tools as functions: check, compare, quantize (calibration from numpy), doctor, bench.
import os

import numpy as np
import pytest

import ferry


def test_doctor():
    d = ferry.doctor()
    assert d.cpu.logical_cpus >= 1 and isinstance(d.cpu.features, list)
    names = [b.name for b in d.backends]
    assert "cpu" in names and any(b.usable for b in d.backends if b.name == "cpu")
    assert isinstance(d.verdict, str) and d.verdict
    assert "cpu" in d.to_dict()["cpu"]["model"].lower() or d.to_dict()["cpu"]["logical_cpus"] >= 1


def test_check(demo_model):
    r = ferry.check(demo_model, "cpu")
    assert r.passed and r.verdict == "pass" and r.nodes > 0 and r.runs + r.decomposed + r.fallback == r.nodes
    assert "cpu" in ferry.check_targets() and "tensorrt-10.1" in ferry.check_targets()
    with pytest.raises(ferry.Error, match="tensorrt"):  # the error lists the known targets
        ferry.check(demo_model, "no-such-target")


def test_compare_per_layer(demo_model, demo_batch):
    x, _ = demo_batch
    same = ferry.compare(demo_model, ref="cpu-ref:fp32", target="cpu:fp32", inputs={"image": x})
    assert same.passed and same.outputs[0].name == "logits" and same.outputs[0].cosine > 0.9999
    assert len(same.layers) > 0 and same.first_diverging is None
    # A target that cannot meet the threshold: fp16 with a cosine bar of exactly 1 fails and names a layer.
    half = ferry.compare(demo_model, target="cpu:fp16", inputs=[{"image": x[:4]}, {"image": x[4:]}],
                         cosine_min=1.0, max_abs=0.0)
    assert not half.passed and half.samples == 2
    assert half.first_diverging is not None and half.first_diverging.node
    with pytest.raises(ferry.InvalidArgument, match="img"):
        ferry.compare(demo_model, inputs={"img": x})


def test_quantize_from_numpy_dict(demo_model, demo_batch, tmp_path):
    x, ref = demo_batch
    out = tmp_path / "digits_int8.onnx"
    r = ferry.quantize(demo_model, {"image": x}, out, method="minmax", batch=4)
    assert r.path == str(out) and os.path.getsize(out) > 0
    assert r.samples == 8 and r.quantized_nodes > 0 and r.int8_weights > 0
    assert 0.9 < r.cosine_mean <= 1.0
    q = ferry.InferenceSession(str(out)).run(None, {"image": x})[0]
    assert (q.argmax(1) == ref.argmax(1)).mean() >= 0.75
    # An iterable of dicts (a DataLoader) gives the same file as the dict of its concatenation.
    out2 = tmp_path / "digits_int8_iter.onnx"
    ferry.quantize(demo_model, ({"image": x[i:i + 2]} for i in range(0, 8, 2)), out2, method="minmax", batch=4)
    assert open(out, "rb").read() == open(out2, "rb").read()
    with pytest.raises(ferry.InvalidArgument):
        ferry.quantize(str(out), {"image": x}, tmp_path / "again.onnx")  # already quantized
    # reduce_range: 7-bit weights on request, 8-bit on request (docs/quantization.md "Reduce range").
    r7 = ferry.quantize(demo_model, {"image": x}, tmp_path / "r7.onnx", method="minmax", batch=4, reduce_range=True)
    assert r7.reduce_range and r7.weights_7bit > 0
    r8 = ferry.quantize(demo_model, {"image": x}, tmp_path / "r8.onnx", method="minmax", batch=4, reduce_range=False)
    assert not r8.reduce_range and r8.weights_7bit == 0


def test_bench(demo_model):
    b = ferry.bench(demo_model, runs=5, warmup=1, threads=1, batch=2)
    assert b.runs == 5 and 0 < b.min_ms <= b.p50_ms <= b.p90_ms

# ONNX Runtime's session API on ferry (`import ferry as ort`): every method, numpy in and out,
# errors, threads, profiling, .ferry files, precision and devices.
import json
import os
import subprocess
import threading

import numpy as np
import pytest

import ferry
import ferry as ort


def test_run_matches_pytorch(demo_model, demo_batch):
    x, ref = demo_batch
    sess = ort.InferenceSession(demo_model, providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {"image": x})
    assert logits.dtype == np.float32 and logits.shape == ref.shape
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)
    (by_name,) = sess.run(["logits"], {"image": x})
    assert np.array_equal(by_name, logits)


def test_inputs_outputs_meta_providers(demo_model):
    sess = ort.InferenceSession(demo_model)
    (i,) = sess.get_inputs()
    (o,) = sess.get_outputs()
    assert (i.name, i.shape, i.type) == ("image", ["batch", 1, 28, 28], "tensor(float)")
    assert o.name == "logits" and o.type == "tensor(float)" and len(o.shape) == 2 and o.shape[1] == 10
    assert isinstance(o.shape[0], str)  # symbolic: the batch
    assert "NodeArg(name='image'" in repr(i)
    meta = sess.get_modelmeta()
    assert meta.producer_name == "pytorch" and isinstance(meta.custom_metadata_map, dict)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert ort.get_device() in ("CPU", "GPU")
    assert sess.get_overridable_initializers() == []
    assert isinstance(sess.get_session_options(), ort.SessionOptions)
    assert sess.device == "cpu"


def test_bytes_and_pathlike(demo_model, demo_batch):
    import pathlib

    x, _ = demo_batch
    a = ort.InferenceSession(demo_model).run(None, {"image": x})[0]
    with open(demo_model, "rb") as f:
        b = ort.InferenceSession(f.read()).run(None, {"image": x})[0]
    c = ort.InferenceSession(pathlib.Path(demo_model)).run(None, {"image": x})[0]
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_session_options_and_run_options(demo_model, demo_batch):
    x, ref = demo_batch
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.x", "1")
    assert so.get_session_config_entry("session.x") == "1"
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    ro.run_tag = "t"
    sess = ort.InferenceSession(demo_model, sess_options=so, providers=["CPUExecutionProvider"])
    out = sess.run(None, {"image": x}, ro)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
        so.graph_optimization_level = level
        np.testing.assert_allclose(ort.InferenceSession(demo_model, so).run(None, {"image": x})[0], ref, rtol=1e-4, atol=1e-4)


def test_log_severity_levels(demo_model, demo_batch, capfd):
    x, _ = demo_batch
    so = ort.SessionOptions()
    so.logid = "mylog"
    sess = ort.InferenceSession(demo_model, so)  # 2, warning: nothing on a good run
    sess.run(None, {"image": x})
    assert capfd.readouterr().err == ""
    so.log_severity_level = 1  # info: the session's line
    sess = ort.InferenceSession(demo_model, so)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "[I:ferry:mylog] session: " in err, err
    assert "digits_cnn.onnx on cpu, opt level 2, " in err and " nodes, all intra-op thread(s)" in err, err
    sess.run(None, {"image": x})
    assert capfd.readouterr().err == ""  # no line per run above verbose
    ro = ort.RunOptions()
    assert ro.log_severity_level == -1  # the session's
    ro.log_severity_level = 0
    ro.run_tag = "batch-7"
    sess.run(None, {"image": x}, ro)
    err = capfd.readouterr().err
    assert "[V:ferry:mylog] run 'batch-7': " in err and err.rstrip().endswith(" ms"), err
    ro.logid = "runlog"
    with pytest.raises(ort.InvalidArgument):
        sess.run(None, {"image": x[:, :, :10]}, ro)
    err = capfd.readouterr().err
    assert "[V:ferry:runlog] run 'batch-7': failed after " in err and "image" in err, err
    so.log_severity_level = 0  # verbose session: every run has its line
    sess = ort.InferenceSession(demo_model, so)
    sess.run(None, {"image": x})
    err = capfd.readouterr().err
    assert "[I:ferry:mylog] session: " in err and "[V:ferry:mylog] run: " in err, err
    so.log_severity_level = 7
    with pytest.raises(ort.InvalidArgument, match="log_severity_level 7"):
        ort.InferenceSession(demo_model, so)
    ro.log_severity_level = 9
    with pytest.raises(ort.InvalidArgument, match="RunOptions.log_severity_level 9"):
        sess.run(None, {"image": x}, ro)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        import warnings

        so.log_severity_level = 3  # error: the CUDA fallback's warning is not shown
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ort.InferenceSession(demo_model, so, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        assert [w for w in caught if "CUDAExecutionProvider" in str(w.message)] == []
        so.log_severity_level = 2
        with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider"):
            ort.InferenceSession(demo_model, so, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_run_options_terminate(demo_model, demo_batch, tmp_path):
    x, _ = demo_batch
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(demo_model, so)
    ro = ort.RunOptions()
    assert ro.terminate is False
    ro.terminate = True
    with pytest.raises(ort.Terminated, match="terminate"):
        sess.run(None, {"image": x}, ro)
    assert issubclass(ort.Terminated, ort.Error)
    ro.terminate = False
    ro.run_tag = "again"
    expect = sess.run(None, {"image": x})[0]
    assert np.array_equal(sess.run(None, {"image": x}, ro)[0], expect)
    with open(sess.end_profiling()) as f:
        assert "model_run again" in [e["name"] for e in json.load(f)]
    # From another thread while runs go on: the worker's runs end (mid-run or at the next start).
    big = np.ascontiguousarray(np.repeat(x, 16, axis=0))
    ro = ort.RunOptions()
    started, outcome = threading.Event(), []

    def worker():
        try:
            while True:
                sess.run(None, {"image": big}, ro)
                started.set()
        except ort.Terminated as e:
            outcome.append(str(e))
        except Exception as e:  # noqa: BLE001 - reported below
            outcome.append(repr(e))
        started.set()

    t = threading.Thread(target=worker)
    t.start()
    assert started.wait(timeout=60)
    ro.terminate = True
    t.join(timeout=60)
    assert not t.is_alive()
    assert len(outcome) == 1 and "terminated" in outcome[0], outcome


def test_profiling_writes_chrome_trace(demo_model, demo_batch, tmp_path):
    x, _ = demo_batch
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(demo_model, so)
    for _ in range(3):
        sess.run(None, {"image": x})
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "prof")) and path.endswith(".json")
    events = json.load(open(path))
    runs = [e for e in events if e["name"] == "model_run"]
    nodes = [e for e in events if e["cat"] == "Node"]
    assert len(runs) == 3 and len(nodes) >= 3 * 3
    assert all(e["ph"] == "X" and e["dur"] >= 0 and "op_name" in e["args"] for e in nodes)
    assert ort.InferenceSession(demo_model).end_profiling() == ""


def test_outputs_own_their_buffers(demo_model, demo_batch):
    x, _ = demo_batch
    sess = ort.InferenceSession(demo_model)
    a = sess.run(None, {"image": x})[0]
    keep = a.copy()
    b = sess.run(None, {"image": x[::-1].copy()})[0]
    assert np.array_equal(a, keep)  # a later run does not write over an earlier result
    assert a.flags.writeable and a.flags.c_contiguous and a.base is not None  # ferry's buffer, no copy
    a += 1  # writable
    assert not np.array_equal(a, b)


def test_inputs_read_in_place_and_not_written(demo_model, demo_batch):
    x, ref = demo_batch
    sess = ort.InferenceSession(demo_model)
    x0 = x.copy()
    sess.run(None, {"image": x})
    assert np.array_equal(x, x0)
    # Non-contiguous, lists and other array-likes are converted.
    wide = np.zeros((8, 1, 28, 56), np.float32)
    wide[..., ::2] = x
    np.testing.assert_allclose(sess.run(None, {"image": wide[..., ::2]})[0], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sess.run(None, {"image": x[:1].tolist()})[0], ref[:1], rtol=1e-4, atol=1e-4)


def test_errors_name_the_input(demo_model, demo_batch):
    x, _ = demo_batch
    sess = ort.InferenceSession(demo_model)
    with pytest.raises(ferry.InvalidArgument) as e:
        sess.run(None, {"image": x.astype(np.float64)})
    assert "image" in str(e.value) and "tensor(float)" in str(e.value) and "tensor(double)" in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, ferry.Error)
    with pytest.raises(ferry.Error) as e:
        sess.run(None, {"image": np.zeros((2, 3, 28, 28), np.float32)})
    assert "image" in str(e.value) and "3" in str(e.value)
    with pytest.raises(ferry.InvalidArgument, match="no input named 'img'"):
        sess.run(None, {"img": x})
    with pytest.raises(ferry.InvalidArgument, match="no output named 'nope'"):
        sess.run(["nope"], {"image": x})
    with pytest.raises(ferry.Error):
        sess.run(None, {})
    with pytest.raises(ferry.NotFound):
        ort.InferenceSession("/nonexistent/model.onnx")
    with pytest.raises(ferry.Error):
        ort.InferenceSession(b"this is not a model")
    with pytest.raises(ferry.InvalidArgument, match="provider"):
        ort.InferenceSession(demo_model, providers=["TensorrtExecutionProvider"])
    with pytest.raises(ferry.Error, match="precision"):
        ort.InferenceSession(demo_model, precision="fp12")
    assert ort.InvalidGraph is ferry.InvalidModel and ort.Fail is ferry.InternalError


def test_concurrent_runs_from_threads(demo_model, demo_batch):
    x, _ = demo_batch
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(demo_model, so)
    samples = [np.ascontiguousarray(np.roll(x, k, axis=0)) for k in range(4)]
    expect = [sess.run(None, {"image": s})[0] for s in samples]
    errors = []

    def worker(t):
        try:
            for r in range(25):
                k = (t + r) % 4
                out = sess.run(None, {"image": samples[k]})[0]
                if not np.array_equal(out, expect[k]):
                    errors.append(f"thread {t} run {r}: output differs")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_devices_and_precision(demo_model, demo_batch):
    x, ref = demo_batch
    oracle = ort.InferenceSession(demo_model, device="cpu-ref")
    assert oracle.device == "cpu-ref" and oracle.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_allclose(oracle.run(None, {"image": x})[0], ref, rtol=1e-4, atol=1e-4)
    half = ort.InferenceSession(demo_model, precision="fp16")
    assert half.precision == "force_fp16"
    out = half.run(None, {"image": x})[0]
    assert out.dtype == np.float32
    assert np.array_equal(out.argmax(1), ref.argmax(1))
    assert not np.array_equal(out, ort.InferenceSession(demo_model).run(None, {"image": x})[0])
    names = [n for n, _ in ferry.devices()]
    assert "cpu" in names and "cpu-ref" in names


def test_ferry_file_from_compile(demo_model, demo_batch, tmp_path):
    x, ref = demo_batch
    out = tmp_path / "digits.ferry"
    res = ferry.compile(demo_model, out, batch_gears=[1, 8])
    assert res.path == str(out) and os.path.getsize(out) > 0
    sess = ort.InferenceSession(str(out))
    assert sess.batch_sizes == [1, 8] and sess.get_inputs()[0].shape[0] == "batch"
    np.testing.assert_allclose(sess.run(None, {"image": x})[0], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sess.run(None, {"image": x[:3]})[0], ref[:3], rtol=1e-4, atol=1e-4)  # padded gear
    with open(out, "rb") as f:
        from_bytes = ort.InferenceSession(f.read())
    assert np.array_equal(from_bytes.run(None, {"image": x})[0], sess.run(None, {"image": x})[0])
    # The file's mode is fixed when it is compiled: the same mode opens it, another is refused
    # naming the file, both modes and what to do.
    assert ort.InferenceSession(str(out), precision="fp32").precision == "force_fp32"
    with pytest.raises(ferry.InvalidArgument) as e:
        ort.InferenceSession(str(out), precision="fp16")
    for part in (str(out), "compiled with precision mode 'force_fp32', asked for 'force_fp16'", "ferry compile --precision-mode force_fp16"):
        assert part in str(e.value)


def test_same_outputs_as_cli_bit_for_bit(demo_model, demo_batch, ferry_cli, tmp_path):
    x, _ = demo_batch
    np.save(tmp_path / "x.npy", x)
    subprocess.run([ferry_cli, "run", demo_model, "--input", f"image={tmp_path / 'x.npy'}", "--threads", "2",
                    "--output-dir", str(tmp_path / "out")], check=True, capture_output=True)
    cli = np.load(tmp_path / "out" / "logits.npy")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    py = ort.InferenceSession(demo_model, so).run(None, {"image": x})[0]
    assert cli.tobytes() == py.tobytes()


def test_help_is_useful():
    assert "run()" in ort.InferenceSession.__doc__ and "GIL" in ort.InferenceSession.__doc__
    assert ort.InferenceSession.run.__doc__ and ferry.quantize.__doc__ and ferry.Error.__doc__

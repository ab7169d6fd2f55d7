# A script written for ONNX Runtime, run with `import ferry as ort` over zoo models: the outputs
# equal `ferry run`'s bit for bit (same threads) and PyTorch's within the zoo's criteria.
import json
import os
import re
import subprocess

import numpy as np
import pytest

import ferry as ort

ZOO = os.environ.get("FERRY_ZOO_DIR", "")
# Small cases of different kinds: a CNN, a dynamic batch, an RNN, a transformer with int64 inputs.
CASES = ["squeezenet1_1_op13", "resnet18_dynbatch_op13_b3", "gru_op13", "bert_small_dynamic_op17_b4_s37"]


def onnxruntime_style_script(model_path, feeds):
    """What an ONNX Runtime user writes (unchanged but for the import)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model_path, sess_options=so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    assert sorted(names) == sorted(feeds)
    out_names = [o.name for o in sess.get_outputs()]
    return out_names, sess.run(out_names, {n: feeds[n] for n in names})


@pytest.mark.parametrize("case", CASES)
def test_zoo_case(case, ferry_cli, tmp_path):
    d = os.path.join(ZOO, case)
    if not os.path.isfile(os.path.join(d, "meta.json")):
        pytest.fail(f"zoo case {case} not generated in FERRY_ZOO_DIR={ZOO!r} (ctest's zoo_models fixture makes it)")
    meta = json.load(open(os.path.join(d, "meta.json")))
    feeds = {n: np.load(os.path.join(d, f)) for n, f in zip(meta["inputs"], meta["input_files"])}
    model = os.path.join(d, "model.onnx")
    out_names, outs = onnxruntime_style_script(model, feeds)
    cmd = [ferry_cli, "run", model, "--threads", "2", "--output-dir", str(tmp_path)]
    for n, f in zip(meta["inputs"], meta["input_files"]):
        cmd += ["--input", f"{n}={os.path.join(d, f)}"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    for k, (name, got) in enumerate(zip(out_names, outs)):
        cli = np.load(tmp_path / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"))
        assert got.dtype == cli.dtype and got.shape == cli.shape, name
        assert got.tobytes() == cli.tobytes(), f"{case}: output '{name}' differs from ferry run's"
        exp = np.load(os.path.join(d, f"expected_{k}.npy")).astype(np.float64)
        g = got.astype(np.float64)
        assert np.max(np.abs(g - exp)) <= 1e-4 * max(np.max(np.abs(exp)), 1e-12) + 1e-6, name

# ferry.Trainer: the same losses as `ferry train` on the same batches, evaluate, export,
# checkpoints and resume, errors.
import json
import os
import subprocess

import numpy as np
import pytest

import ferry

torch = pytest.importorskip("torch")  # Debian's python3-torch (scripts/setup.sh) exports the model


class Tiny(torch.nn.Module):  # Conv + BatchNorm + Dropout + Linear: training-mode BN and dropout seeds
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.1)
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.bn(self.conv(x))), 1).flatten(1)
        return self.fc(self.drop(x))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("trainer")
    torch.manual_seed(0)
    m = Tiny().train()
    path = str(d / "tiny.onnx")
    torch.onnx.export(m, torch.zeros(2, 3, 16, 16), path, input_names=["x"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3, 16, 16)).astype(np.float32)
    y = (x[:, 0].mean(axis=(1, 2)) > 0).astype(np.int64)
    np.savez(d / "data.npz", x=x, labels=y)
    return d, path, x, y


def batches(x, y, steps, b=4):
    for k in range(steps):  # `ferry train --no-shuffle`: step k takes rows k*B .. k*B+B-1, wrapping
        idx = [(k * b + i) % len(x) for i in range(b)]
        yield x[idx], y[idx]


def test_losses_equal_ferry_train(tiny, ferry_cli):
    d, model, x, y = tiny
    subprocess.run([ferry_cli, "train", model, "--data", str(d / "data.npz"), "--batch-size", "4", "--steps", "6",
                    "--no-shuffle", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--threads", "1",
                    "--log", str(d / "log.jsonl"), "--out", str(d / "cli.onnx"), "-q"], check=True, capture_output=True)
    cli = [json.loads(line)["loss"] for line in open(d / "log.jsonl") if '"loss"' in line]
    tr = ferry.Trainer(model, optimizer="sgd", lr=0.1, momentum=0.9, threads=1)
    py = []
    for xb, yb in batches(x, y, 6):
        r = tr.step({"x": xb}, labels=yb)
        assert set(r) >= {"step", "loss", "lr", "time"} and r["lr"] == 0.1
        py.append(r["loss"])
    assert len(cli) == 6 and py == cli, f"ferry train {cli}\nferry.Trainer {py}"
    tr.export(d / "py.onnx")
    a = ferry.InferenceSession(str(d / "py.onnx")).run(None, {"x": x})[0]
    b = ferry.InferenceSession(str(d / "cli.onnx")).run(None, {"x": x})[0]
    assert a.tobytes() == b.tobytes()
    ev = tr.evaluate({"x": x}, y)
    assert ev["samples"] == 16 and 0.0 <= ev["accuracy"] <= 1.0 and np.isfinite(ev["loss"])


def test_checkpoint_resume_continues_exactly(tiny, tmp_path):
    _, model, x, y = tiny
    whole = ferry.Trainer(model, optimizer="adam", lr=0.01, schedule="cosine", steps=6, threads=1)
    expect = [whole.step(xb, yb)["loss"] for xb, yb in batches(x, y, 6)]
    first = ferry.Trainer(model, optimizer="adam", lr=0.01, schedule="cosine", steps=6, threads=1)
    got = [first.step(xb, yb)["loss"] for xb, yb in list(batches(x, y, 6))[:3]]
    first.save_checkpoint(tmp_path / "ck")
    again = ferry.Trainer.resume(tmp_path / "ck")
    assert again.steps_done == 3 and again.batch_size == 4
    got += [again.step(xb, yb)["loss"] for xb, yb in list(batches(x, y, 6))[3:]]
    assert got == expect
    w = again.weights()
    assert all(isinstance(v, np.ndarray) for v in w.values()) and len(w) >= 4


def test_trainer_errors(tiny):
    _, model, x, y = tiny
    tr = ferry.Trainer(model, lr=0.1, batch_size=4)
    with pytest.raises(ferry.InvalidArgument, match="batch_size 4"):
        tr.step({"x": x[:3]}, y[:3])
    with pytest.raises(ferry.InvalidArgument, match="label 7"):
        tr.step({"x": x[:4]}, np.array([0, 1, 7, 0]))
    with pytest.raises(ferry.InvalidArgument, match="no model input named 'img'"):
        tr.step({"img": x[:4]}, y[:4])
    with pytest.raises(ferry.Error):
        ferry.Trainer(model, optimizer="lion", batch_size=4)
    with pytest.raises(ferry.Error):
        ferry.Trainer.resume("/nonexistent/ck")

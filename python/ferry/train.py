"""ferry.Trainer: `ferry train`'s training step fed from any Python data pipeline (numpy batches)."""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ferry

PathLike = Union[str, "os.PathLike[str]"]


class Trainer:
    """Trains an ONNX model exported from PyTorch, one step per batch the caller brings.

    The step is `ferry train`'s: the same training graph (BatchNorm and Dropout in training form,
    the loss), optimizer (torch.optim's semantics), schedule, clipping and loss scaling, so the
    same batches in the same order give `ferry train`'s losses. Keep your DataLoader and
    augmentation; hand each batch to step().

        tr = ferry.Trainer("resnet18.onnx", optimizer="sgd", lr=0.1, momentum=0.9)
        for x, y in loader:                       # numpy (or torch .numpy()) batches
            print(tr.step({"input": x}, labels=y)["loss"])
        tr.export("resnet18_trained.onnx")

    optimizer: "sgd" | "adam" | "adamw" (lr, momentum, dampening, nesterov, weight_decay, betas,
    eps, amsgrad as torch.optim names them; unset lr/weight_decay take torch's defaults).
    schedule: "constant" | "step" | "cosine" | "onecycle" with warmup_steps, step_size, gamma,
    eta_min, max_lr; cosine and onecycle need `steps` (the run's total).
    loss: "cross_entropy" (int64 class labels [N]) | "mse" (float targets shaped as the output).
    amp: None | "bf16" | "fp16" (fp16 turns on dynamic loss scaling). batch_size: the training
    graph's batch; None takes the first step's. threads: intra-op threads (0: all cores).
    """

    def __init__(self, model: PathLike, optimizer: str = "sgd", lr: Optional[float] = None, momentum: float = 0.0,
                 weight_decay: Optional[float] = None, *, dampening: float = 0.0, nesterov: bool = False,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, amsgrad: bool = False,
                 schedule: str = "constant", steps: int = 0, warmup_steps: int = 0, step_size: int = 0,
                 gamma: float = 0.1, eta_min: float = 0.0, max_lr: Optional[float] = None,
                 clip_grad_norm: float = 0.0, loss: str = "cross_entropy", label_smoothing: float = 0.0,
                 freeze: str = "", num_classes: int = 0, amp: Optional[str] = None,
                 keep_fp32: Optional[Sequence[str]] = None, loss_scale: Optional[float] = None,
                 dynamic_loss_scale: bool = True, recompute_segments: int = -1, threads: int = 0,
                 device: str = "cpu", seed: int = 0, batch_size: Optional[int] = None, opt_level: int = -1) -> None:
        self._config: Dict[str, Any] = dict(
            model=os.fspath(model), optimizer=optimizer, lr=lr, momentum=float(momentum), weight_decay=weight_decay,
            dampening=float(dampening), nesterov=bool(nesterov), betas=(float(betas[0]), float(betas[1])),
            eps=float(eps), amsgrad=bool(amsgrad), schedule=schedule, steps=int(steps),
            warmup_steps=int(warmup_steps), step_size=int(step_size), gamma=float(gamma), eta_min=float(eta_min),
            max_lr=max_lr, clip_grad_norm=float(clip_grad_norm), loss=loss, label_smoothing=float(label_smoothing),
            freeze=freeze, num_classes=int(num_classes), amp=amp or "", keep_fp32=list(keep_fp32 or []),
            loss_scale=loss_scale, dynamic_loss_scale=bool(dynamic_loss_scale),
            recompute_segments=int(recompute_segments), threads=int(threads), device=device, seed=int(seed),
            batch_size=int(batch_size or 0), opt_level=int(opt_level))
        self._t = None
        if batch_size:
            self._t = _ferry._Trainer(self._config)

    @classmethod
    def resume(cls, path: PathLike) -> "Trainer":
        """The Trainer a save_checkpoint() folder (or checkpoint file) was written by, at its step."""
        self = cls.__new__(cls)
        self._config = {}
        self._t = _ferry._Trainer.resume(os.fspath(path))
        return self

    def _feed(self, inputs: Union[Mapping[str, Any], np.ndarray]) -> Dict[str, Any]:
        if isinstance(inputs, Mapping):
            return dict(inputs)
        names = [n for n, _ in self._t.data_inputs()]
        if len(names) != 1:
            raise _ferry.InvalidArgument(f"the model has inputs {names}: pass a dict of arrays by name")
        return {names[0]: inputs}

    def _labels(self, labels: Any) -> np.ndarray:
        a = np.asarray(labels)
        if a.dtype.kind in "iu":
            return np.ascontiguousarray(a, dtype=np.int64)
        return np.ascontiguousarray(a, dtype=np.float32)

    def step(self, inputs: Union[Mapping[str, Any], np.ndarray], labels: Any) -> Dict[str, Any]:
        """One optimizer step on a batch; returns {"step", "loss", "lr", "time" (s), "time_ms",
        "skipped" (and "loss_scale" with loss scaling)}."""
        y = self._labels(labels)
        if self._t is None:
            self._config["batch_size"] = int(y.shape[0]) if y.ndim else 1
            self._t = _ferry._Trainer(self._config)
        return self._t.step(self._feed(inputs), y)

    def evaluate(self, inputs: Union[Mapping[str, Any], np.ndarray], labels: Any) -> Dict[str, Any]:
        """Loss (and accuracy for cross_entropy) of the current weights on a batch, the model in
        inference mode (BatchNorm's running statistics, no Dropout), as `ferry train`'s evaluation."""
        if self._t is None:
            raise _ferry.InvalidArgument("evaluate: no step has run yet (or give batch_size= to Trainer)")
        return self._t.evaluate(self._feed(inputs), self._labels(labels))

    def export(self, path: PathLike) -> None:
        """Writes the trained inference model (`ferry train --out`): InferenceSession(path) runs it."""
        self._require("export")
        self._t.export(os.fspath(path))

    def save_checkpoint(self, dir: PathLike, keep: int = 3) -> None:
        """Writes a checkpoint (weights, optimizer and loss-scaler state, configuration) into `dir`,
        keeping the last `keep`; Trainer.resume(dir) continues from it bit for bit."""
        self._require("save_checkpoint")
        self._t.save_checkpoint(os.fspath(dir), int(keep))

    def weights(self) -> Dict[str, np.ndarray]:
        """Copies of the current parameters and BatchNorm statistics, by initializer name."""
        self._require("weights")
        return self._t.weights()

    @property
    def steps_done(self) -> int:
        return 0 if self._t is None else self._t.steps_done

    @property
    def batch_size(self) -> Optional[int]:
        return None if self._t is None else self._t.batch_size

    def _require(self, what: str) -> None:
        if self._t is None:
            raise _ferry.InvalidArgument(f"{what}: no step has run yet (or give batch_size= to Trainer)")

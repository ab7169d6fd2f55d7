"""ferry's tools as functions returning objects: compile, check, compare, quantize, doctor, bench.

They run the same library code as the `ferry` commands of the same names and raise ferry.Error
subclasses with the same messages.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import _ferry

PathLike = Union[str, "os.PathLike[str]"]


class Result:
    """A tool's answer: its fields as attributes (rows as lists of Result); to_dict() gives them all."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        for k, v in fields.items():
            setattr(self, k, _wrap(v))

    def to_dict(self) -> Dict[str, Any]:
        return {k: _unwrap(v) for k, v in self.__dict__.items()}

    def __repr__(self) -> str:
        short = {k: v for k, v in self.__dict__.items() if not isinstance(v, list) or len(v) <= 3}
        more = [k for k, v in self.__dict__.items() if isinstance(v, list) and len(v) > 3]
        text = ", ".join(f"{k}={v!r}" for k, v in short.items())
        if more:
            text += ", " + ", ".join(f"{k}=[{len(getattr(self, k))} rows]" for k in more)
        return f"{type(self).__name__}({text})"


def _wrap(v: Any) -> Any:
    if isinstance(v, dict) and all(isinstance(k, str) and k.isidentifier() for k in v):
        return Result(v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


def _unwrap(v: Any) -> Any:
    if isinstance(v, Result):
        return v.to_dict()
    if isinstance(v, list):
        return [_unwrap(x) for x in v]
    return v


class CheckResult(Result):
    """ferry.check's answer: counts per verdict, `rows` (one per node that does not simply run:
    node, op, opset, verdict, reason, fix), `passed`."""


class CompareResult(Result):
    """ferry.compare's answer: `outputs` (per output metrics), `layers` (per layer rows when
    per_layer), `first_diverging` (the first layer over threshold whose inputs were within it, or
    None), `passed`."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        super().__init__(fields)
        i = fields.get("first_diverging")
        self.first_diverging = self.layers[i] if i is not None else None


class QuantizeResult(Result):
    """ferry.quantize's answer: `path` of the QDQ model written, counts, `cosine_mean` /
    `cosine_min` of its outputs against the float model on the calibration data."""


class CompileResult(Result):
    """ferry.compile's answer: `path` of the .ferry file and what the compiler did."""


class DoctorResult(Result):
    """ferry.doctor's answer: `cpu`, `cuda`, `backends` (name, usable, detail, fix), `verdict`, `ok`."""


class BenchResult(Result):
    """ferry.bench's answer: latencies in ms over `runs` timed runs (after `warmup`)."""


def _path(p: PathLike) -> str:
    return os.fspath(p)


def doctor() -> DoctorResult:
    """What this machine can run: CPU features, the CUDA stack, each backend's health (`ferry doctor`)."""
    return DoctorResult(_ferry._doctor())


def check_targets() -> List[str]:
    """Every target ferry.check knows."""
    return list(_ferry._check_targets())


def check(model: PathLike, target: str = "cpu", *, no_fallback: bool = False) -> CheckResult:
    """Will `model` run on `target` (a ferry device or an external profile: ferry.check_targets())?
    One row per node that does not simply run, with the reason and a fix (`ferry check`)."""
    return CheckResult(_ferry._check(_path(model), target, no_fallback))


def compile(model: PathLike, out: PathLike, *, device: str = "cpu", opt_level: int = -1,
            input_shapes: Optional[Mapping[str, Sequence[int]]] = None, batch_gears: Optional[Sequence[int]] = None,
            precision: Optional[str] = None, precision_config: Optional[PathLike] = None, tune: bool = False,
            threads: int = 0, prepack: bool = True) -> CompileResult:
    """Compiles an ONNX model into a .ferry file (`ferry compile`): fixed input shapes, batch gears,
    precision, tuned kernels, pre-packed weights. InferenceSession(out) runs it."""
    shapes = [f"{k}:{','.join(str(int(d)) for d in v)}" for k, v in (input_shapes or {}).items()]
    return CompileResult(_ferry._compile(_path(model), _path(out), device, int(opt_level), shapes,
                                         [int(b) for b in (batch_gears or [])], precision or "",
                                         _path(precision_config) if precision_config else "", bool(tune),
                                         int(threads), bool(prepack)))


def _samples(inputs: Union[Mapping[str, Any], Iterable[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
    if isinstance(inputs, Mapping):
        return [dict(inputs)]
    return [dict(s) for s in inputs]


def compare(model: PathLike, ref: str = "cpu-ref:fp32", target: str = "cpu:fp32", *,
            inputs: Union[Mapping[str, Any], Iterable[Mapping[str, Any]]], per_layer: bool = True,
            cosine_min: float = 0.99, max_abs: float = 0.01, threads: int = 0,
            keep_fp32: Optional[Sequence[str]] = None, ref_model: Optional[PathLike] = None) -> CompareResult:
    """Runs `model` as `ref` and as `target` (device:precision[:opt-level], e.g. "cpu:fp16") on
    `inputs` (a dict of arrays, or an iterable of such dicts: one sample each) and compares them
    per output and, with per_layer, per layer (`ferry compare`)."""
    return CompareResult(_ferry._compare(_path(model), ref, target, _samples(inputs), bool(per_layer),
                                         float(cosine_min), float(max_abs), int(threads), list(keep_fp32 or []),
                                         _path(ref_model) if ref_model else ""))


def quantize(model: PathLike, calibration: Union[PathLike, Mapping[str, Any], Iterable[Mapping[str, Any]]], out: PathLike,
             *, method: str = "percentile", batch: int = 8, max_samples: int = 0,
             keep_fp32: Optional[Sequence[str]] = None, target_cosine: float = 0.0, bias_correction: bool = False,
             weight_rounding: str = "nearest", threads: int = 0, reduce_range: Optional[bool] = None) -> QuantizeResult:
    """Post-training int8 quantization (`ferry quantize`): calibrates on `calibration` (a dict of
    arrays whose axis 0 is the sample, an iterable of such dicts, or a path: .npz, a folder of
    .npy/.npz), writes the QDQ model to `out` and measures its output cosine to the float model.
    `reduce_range`: True for 7-bit weights (`--reduce-range`), False for 8-bit, None (default) chosen as
    the CLI does (docs/quantization.md "Reduce range"); the answer's `reduce_range`, `weights_7bit`."""
    rr = -1 if reduce_range is None else int(bool(reduce_range))
    if isinstance(calibration, (str, os.PathLike)):
        return QuantizeResult(_ferry._quantize(_path(model), _path(out), _path(calibration), int(batch),
                                               int(max_samples), method, list(keep_fp32 or []), float(target_cosine),
                                               bool(bias_correction), weight_rounding, int(threads), rr))
    import numpy as np

    if isinstance(calibration, Mapping):
        arrays = {k: np.asarray(v) for k, v in calibration.items()}
    else:
        batches = list(calibration)
        if not batches:
            raise _ferry.InvalidArgument("quantize: the calibration iterable yielded no batch")
        arrays = {k: np.concatenate([np.asarray(b[k]) for b in batches], axis=0) for k in batches[0]}
    # The calibration loader reads .npz (the CLI's format): the arrays go through one, by name.
    with tempfile.TemporaryDirectory(prefix="ferry_calib_") as d:
        path = os.path.join(d, "calibration.npz")
        np.savez(path, **arrays)
        return QuantizeResult(_ferry._quantize(_path(model), _path(out), path, int(batch), int(max_samples), method,
                                               list(keep_fp32 or []), float(target_cosine), bool(bias_correction),
                                               weight_rounding, int(threads), rr))


def bench(model: PathLike, inputs: Optional[Mapping[str, Any]] = None, *, runs: int = 50, warmup: int = 5,
          threads: int = 0, device: Optional[str] = None, precision: Optional[str] = None,
          batch: int = 1) -> BenchResult:
    """Times InferenceSession.run on `inputs` (random ones of the model's shapes, symbolic dims =
    `batch`, when None): p50 / p90 / mean / min in ms over `runs` runs after `warmup`."""
    import numpy as np

    from ._session import InferenceSession, SessionOptions

    so = SessionOptions()
    so.intra_op_num_threads = threads
    sess = InferenceSession(model, so, device=device, precision=precision)
    if inputs is None:
        rng = np.random.default_rng(0)
        inputs = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) else batch for d in (i.shape or [])]
            dt = i.type[len("tensor("):-1]
            dt = {"float": "float32", "double": "float64"}.get(dt, dt)
            if dt.startswith("float"):
                inputs[i.name] = rng.standard_normal(shape).astype(dt)
            elif dt == "bool":
                inputs[i.name] = np.zeros(shape, dtype=bool)
            else:
                inputs[i.name] = np.zeros(shape, dtype=dt)
    feed = dict(inputs)
    for _ in range(max(warmup, 0)):
        sess.run(None, feed)
    times = []
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return BenchResult({"model": _path(model), "device": sess.device, "runs": len(times), "warmup": warmup,
                        "p50_ms": statistics.median(times), "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))],
                        "mean_ms": statistics.fmean(times), "min_ms": times[0]})

"""ONNX Runtime's inference API on ferry: InferenceSession, SessionOptions, RunOptions, NodeArg."""

from __future__ import annotations

import enum
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _ferry


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels; ferry maps them to its opt levels 0, 1, 2 and the device's default."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Accepted for ONNX Runtime scripts; ferry runs nodes in order (its kernels use intra-op threads)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """Options of an InferenceSession, as ONNX Runtime's.

    Used by ferry: intra_op_num_threads (0: the machine's cores), graph_optimization_level,
    enable_profiling / profile_file_prefix (a Chrome trace written by end_profiling()),
    log_severity_level (as ORT: 0 verbose: a line per run on stderr; 1 info: a line when the
    session opens; 2 warning (the default): warnings only; 3 error and 4 fatal: no warnings either)
    and logid (named in the log lines).
    ferry's own: device ("cpu", "cpu-ref", "cuda:0"; wins over providers), precision (force_fp32,
    allow_fp32_to_fp16, force_fp16, force_bf16, allow_mix_precision, or fp16 / bf16 / mix) and
    keep_fp32 (node names kept in fp32 whatever the precision).
    Accepted and kept for ONNX Runtime scripts, without effect: inter_op_num_threads,
    execution_mode, log_verbosity_level, enable_cpu_mem_arena, enable_mem_pattern,
    use_deterministic_compute (ferry's runs are deterministic), and session config entries.
    """

    def __init__(self) -> None:
        self.intra_op_num_threads: int = 0
        self.inter_op_num_threads: int = 0
        self.graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling: bool = False
        self.profile_file_prefix: str = "ferry_profile"
        self.log_severity_level: int = 2
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.enable_cpu_mem_arena: bool = True
        self.enable_mem_pattern: bool = True
        self.use_deterministic_compute: bool = False
        self.optimized_model_filepath: str = ""
        self.device: Optional[str] = None
        self.precision: Optional[str] = None
        self.keep_fp32: List[str] = []
        self._config: Dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise _ferry.InvalidArgument(f"SessionOptions: no config entry '{key}'")
        return self._config[key]

    def __repr__(self) -> str:
        return (f"SessionOptions(intra_op_num_threads={self.intra_op_num_threads}, "
                f"graph_optimization_level={self.graph_optimization_level!r}, "
                f"enable_profiling={self.enable_profiling}, device={self.device!r}, precision={self.precision!r})")


class RunOptions:
    """Per-run options, as ONNX Runtime's.

    terminate: set it (from any thread) to end the runs given these options: a run not started
    raises ferry.Terminated at once, a run in progress before its next node; set it back to False
    to run again. log_severity_level: the run's severity (-1, the default: the session's); 0
    writes a line per run on stderr (time, run_tag, failure). run_tag: names the run in the log
    lines and in the profile (model_run <tag>). logid: named in the log lines (default: the
    session's). Kept for ONNX Runtime scripts, without effect: log_verbosity_level,
    only_execute_path_to_fetches (ferry runs the whole graph), run config entries.
    """

    def __init__(self) -> None:
        self.log_severity_level: int = -1
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.run_tag: str = ""
        self.only_execute_path_to_fetches: bool = False
        self._config: Dict[str, str] = {}
        self._control = _ferry._RunControl()

    @property
    def terminate(self) -> bool:
        return self._control.terminate

    @terminate.setter
    def terminate(self, value: bool) -> None:
        self._control.terminate = bool(value)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise _ferry.InvalidArgument(f"RunOptions: no config entry '{key}'")
        return self._config[key]


class NodeArg:
    """A model input or output: name, shape (ints; symbolic dims as strings, unknown ones None) and
    type ("tensor(float)")."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name: str, shape: Optional[List[Union[int, str, None]]], type: str) -> None:
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


class ModelMetadata:
    """What the model file says about itself (ONNX Runtime's ModelMetadata)."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.producer_name: str = d["producer_name"]
        self.producer_version: str = d["producer_version"]
        self.graph_name: str = d["graph_name"]
        self.domain: str = d["domain"]
        self.description: str = d["description"]
        self.graph_description: str = ""
        self.version: int = d["version"]
        self.custom_metadata_map: Dict[str, str] = dict(d["custom_metadata_map"])

    def __repr__(self) -> str:
        return (f"ModelMetadata(producer_name='{self.producer_name}', graph_name='{self.graph_name}', "
                f"version={self.version}, custom_metadata_map={self.custom_metadata_map})")


_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


def get_available_providers() -> List[str]:
    """The ONNX Runtime provider names this build can run: CUDAExecutionProvider when ferry has its
    CUDA backend and a GPU is usable, and CPUExecutionProvider."""
    out = []
    if any(name == "cuda" for name, _ in _ferry._devices()) and _ferry._device_available("cuda:0"):
        out.append("CUDAExecutionProvider")
    out.append("CPUExecutionProvider")
    return out


def get_all_providers() -> List[str]:
    return list(_PROVIDERS)


def get_device() -> str:
    """"GPU" when a CUDA device is usable, else "CPU" (as onnxruntime.get_device())."""
    return "GPU" if "CUDAExecutionProvider" in get_available_providers() else "CPU"


def _device_from_providers(providers: Optional[Sequence[Any]], provider_options: Optional[Sequence[dict]],
                           log_severity_level: int = 2) -> str:
    if not providers:
        return ""
    for i, p in enumerate(providers):
        name, opts = (p[0], dict(p[1])) if isinstance(p, (tuple, list)) else (p, {})
        if provider_options and i < len(provider_options) and provider_options[i]:
            opts.update(provider_options[i])
        if name == "CPUExecutionProvider":
            return "cpu"
        if name == "CUDAExecutionProvider":
            device = f"cuda:{int(opts.get('device_id', 0))}"
            if _ferry._device_available(device):
                return device
            if log_severity_level <= 2:
                warnings.warn(f"CUDAExecutionProvider: {device} is not usable here (see ferry.doctor()); "
                              "falling back to the next provider", RuntimeWarning, stacklevel=3)
            continue
        raise _ferry.InvalidArgument(
            f"provider '{name}' is not one ferry maps to a device; ferry takes CPUExecutionProvider and "
            "CUDAExecutionProvider, or a ferry device: InferenceSession(..., device='cpu' | 'cpu-ref' | 'cuda:0')")
    return "cpu"


def _log_level(level: Any, where: str) -> int:
    level = int(level)
    if 0 <= level <= 4:
        return level
    raise _ferry.InvalidArgument(f"{where}.log_severity_level {level}: use 0 (verbose), 1 (info), 2 (warning), "
                                 "3 (error) or 4 (fatal)" + (", or -1 (the session's)" if where == "RunOptions" else ""))


def _opt_level(level: Any) -> int:
    level = int(level)
    if level == GraphOptimizationLevel.ORT_ENABLE_ALL:
        return -1
    if level in (0, 1, 2):
        return level
    raise _ferry.InvalidArgument(f"graph_optimization_level {level}: use a GraphOptimizationLevel value")


class InferenceSession:
    """A loaded model ready to run, as onnxruntime.InferenceSession.

    path_or_bytes: an .onnx or compiled .ferry file (str or os.PathLike), or the bytes of either.
    sess_options: SessionOptions (threads, optimization level, profiling, ferry's device/precision).
    providers: ONNX Runtime provider names ("CPUExecutionProvider", "CUDAExecutionProvider" or
    ("CUDAExecutionProvider", {"device_id": 1})), mapped to ferry's devices; the first usable wins.
    device, precision, keep_fp32: ferry's own, winning over sess_options and providers.

    run() is safe to call from several threads at once; the GIL is released while the model runs.
    Inputs that are C-contiguous numpy arrays of the input's dtype are read in place; the arrays
    returned own ferry's output buffers (no copy).
    """

    def __init__(self, path_or_bytes: Union[str, bytes, "os.PathLike[str]"], sess_options: Optional[SessionOptions] = None,
                 providers: Optional[Sequence[Any]] = None, provider_options: Optional[Sequence[dict]] = None, *,
                 device: Optional[str] = None, precision: Optional[str] = None,
                 keep_fp32: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        so = sess_options if sess_options is not None else SessionOptions()
        o = _ferry._OpenOptions()
        self._log_level = _log_level(so.log_severity_level, "SessionOptions")
        o.device = device or so.device or _device_from_providers(providers, provider_options, self._log_level)
        o.threads = int(so.intra_op_num_threads or 0)
        o.opt_level = _opt_level(so.graph_optimization_level)
        o.precision = precision or so.precision or ""
        o.keep_fp32 = list(keep_fp32 if keep_fp32 is not None else so.keep_fp32)
        o.profile = bool(so.enable_profiling)
        o.log_level = self._log_level
        o.logid = str(so.logid or "")
        self._logid = o.logid
        self._sess_options = so
        self._model_path = path_or_bytes if not isinstance(path_or_bytes, (bytes, bytearray, memoryview)) else None
        self._sess = _ferry._Session(path_or_bytes, o)
        self._inputs = [NodeArg(*t) for t in self._sess.io_info(True)]
        self._outputs = [NodeArg(*t) for t in self._sess.io_info(False)]
        self._run = self._sess.run

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> List[NodeArg]:
        return []

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._sess.metadata())

    def get_providers(self) -> List[str]:
        d = self._sess.device
        return ["CUDAExecutionProvider", "CPUExecutionProvider"] if d.startswith("cuda") else ["CPUExecutionProvider"]

    def get_provider_options(self) -> Dict[str, Dict[str, str]]:
        d = self._sess.device
        out: Dict[str, Dict[str, str]] = {"CPUExecutionProvider": {}}
        if d.startswith("cuda"):
            out["CUDAExecutionProvider"] = {"device_id": d.partition(":")[2] or "0"}
        return out

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Optional[RunOptions] = None) -> List[Any]:
        """Runs the model on input_feed ({name: array}); returns the outputs named (all when None)
        as numpy arrays, in that order."""
        if type(input_feed) is not dict:
            input_feed = dict(input_feed)
        if run_options is None:
            return self._run(output_names, input_feed)
        level = self._log_level if run_options.log_severity_level < 0 else _log_level(run_options.log_severity_level, "RunOptions")
        return self._sess.run_with(output_names, input_feed, run_options._control, level, str(run_options.run_tag or ""),
                                   str(run_options.logid or self._logid))

    def end_profiling(self) -> str:
        """Writes the Chrome trace of the runs so far (SessionOptions.enable_profiling) and returns
        its path ("" when profiling is off)."""
        return self._sess.end_profiling(self._sess_options.profile_file_prefix)

    def disable_fallback(self) -> None:
        pass

    def enable_fallback(self) -> None:
        pass

    # ferry's own
    @property
    def device(self) -> str:
        """The ferry device running the model ("cpu", "cpu-ref", "cuda:0")."""
        return self._sess.device

    @property
    def precision(self) -> str:
        """The precision mode the model runs in ("" or "force_fp32": fp32)."""
        return self._sess.precision

    @property
    def batch_sizes(self) -> List[int]:
        """The batch gears of a compiled .ferry file (empty: one plan)."""
        return list(self._sess.batch_sizes)

    def __repr__(self) -> str:
        return f"InferenceSession({self._model_path!r}, device='{self.device}')"

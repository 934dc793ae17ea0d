"""float32 matrix products under torch.set_float32_matmul_precision and
torch.tpu.precision: "medium" / Precision.DEFAULT let products with both sides
of at least 64 round their operands to bfloat16 (float32 accumulation, bias and
output float32) on CPUs with AVX512_BF16; "high", "highest", Precision.HIGH and
HIGHEST, smaller products and other kernel ISAs stay float32. The permission is
captured when the op is issued, not when the queue runs it.

References are computed in float64 on the CPU: `exact` from the float32
operands, `rounded` from the operands rounded to bfloat16."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from conftest import DRIVER

P = torch.tpu.Precision


def _cpu_has_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return " avx512_bf16" in flags and " avx512bw" in flags and " avx512vl" in flags


BF16 = _cpu_has_bf16() and DRIVER == "host"
pytestmark = pytest.mark.skipif(DRIVER != "host", reason="the pjrt driver lowers float32 dots without a precision")


@pytest.fixture(autouse=True)
def _restore():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def _refs(a, b, bias=None):
    exact = a.double() @ b.double()
    rounded = a.bfloat16().double() @ b.bfloat16().double()
    if bias is not None:
        exact, rounded = exact + bias.double(), rounded + bias.double()
    return exact, rounded


def _check(got, exact, rounded, expect_bf16):
    """got must match the expected reference to float32 accumulation error and,
    for bf16, be measurably away from the exact product (the rounding happened)."""
    got = got.double()
    scale = exact.abs().max().item()
    want = rounded if expect_bf16 else exact
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5 * scale)
    if expect_bf16:
        assert (got - exact).abs().max().item() > 1e-4 * scale, "bfloat16 rounding expected"


def _gen():
    return torch.Generator().manual_seed(0)


CASES = {
    "mm": lambda g: ((torch.randn(96, 128, generator=g), torch.randn(128, 80, generator=g)), None),
    "linear": lambda g: ((torch.randn(64, 256, generator=g), torch.randn(192, 256, generator=g)), "linear"),
    "addmm": lambda g: ((torch.randn(70, 100, generator=g), torch.randn(100, 90, generator=g)), "addmm"),
    "bmm": lambda g: ((torch.randn(3, 64, 72, generator=g), torch.randn(3, 72, 64, generator=g)), None),
}


def _run(name, args, kind, g):
    a, b = args
    if kind == "linear":
        bias = torch.randn(b.shape[0], generator=g)
        got = F.linear(a.to("tpu"), b.to("tpu"), bias.to("tpu")).cpu()
        return got, _refs(a, b.t(), bias)
    if kind == "addmm":
        bias = torch.randn(b.shape[1], generator=g)
        got = torch.addmm(bias.to("tpu"), a.to("tpu"), b.to("tpu")).cpu()
        return got, _refs(a, b, bias)
    got = torch.matmul(a.to("tpu"), b.to("tpu")).cpu()
    return got, _refs(a, b)


@pytest.mark.parametrize("setting", ["highest", "high", "medium"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_global_setting(name, setting):
    g = _gen()
    args, kind = CASES[name](g)
    torch.set_float32_matmul_precision(setting)
    got, (exact, rounded) = _run(name, args, kind, g)
    _check(got, exact, rounded, BF16 and setting == "medium")


@pytest.mark.parametrize("mode,setting,bf16", [
    (P.DEFAULT, "highest", True), (P.HIGH, "medium", False), (P.HIGHEST, "medium", False)])
def test_precision_block_wins_on_its_thread(mode, setting, bf16):
    g = _gen()
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    exact, rounded = _refs(a, b)
    torch.set_float32_matmul_precision(setting)
    with torch.tpu.precision(mode):
        got = (a.to("tpu") @ b.to("tpu")).cpu()
    _check(got, exact, rounded, BF16 and bf16)
    after = (a.to("tpu") @ b.to("tpu")).cpu()  # the block's mode is gone with it
    _check(after, exact, rounded, BF16 and setting == "medium")


def test_small_products_stay_float32():
    g = _gen()
    a, b = torch.randn(16, 512, generator=g), torch.randn(512, 512, generator=g)
    torch.set_float32_matmul_precision("medium")
    exact, rounded = _refs(a, b)
    _check((a.to("tpu") @ b.to("tpu")).cpu(), exact, rounded, False)


def test_permission_is_captured_when_issued():
    g = _gen()
    a, b = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g)
    exact, rounded = _refs(a, b)
    at, bt = a.to("tpu"), b.to("tpu")
    torch.tpu.synchronize()
    torch.set_float32_matmul_precision("medium")
    y = at @ bt  # queued
    torch.set_float32_matmul_precision("highest")
    z = at @ bt
    _check(y.cpu(), exact, rounded, BF16)
    _check(z.cpu(), exact, rounded, False)


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_other_kernel_isas_stay_float32(isa, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_KERNEL_ISA", isa)
    g = _gen()
    a, b = torch.randn(64, 96, generator=g), torch.randn(96, 64, generator=g)
    torch.set_float32_matmul_precision("medium")
    exact, rounded = _refs(a, b)
    _check((a.to("tpu") @ b.to("tpu")).cpu(), exact, rounded, False)


def test_strided_operands():
    """Transposed and sliced operands are rounded from their strides."""
    g = _gen()
    a = torch.randn(200, 150, generator=g)[::2, 10:].t()  # 140 x 100, non-contiguous both ways
    b = torch.randn(100, 300, generator=g)[:, ::3]  # 100 x 100, column stride 3
    torch.set_float32_matmul_precision("medium")
    exact, rounded = _refs(a, b)
    _check((a.to("tpu") @ b.to("tpu")).cpu(), exact, rounded, BF16)


@pytest.mark.parametrize("epilogue", [False, True])
def test_compiled_graph_reads_the_setting_at_each_run(epilogue):
    """A graph compiled by torch.compile(backend="tpu") takes the precision in force
    when it is called, as an eager product would (and as CUDA's compiled products,
    which call cuBLAS at run time), torch.tpu.precision() blocks included."""
    import torch._dynamo

    torch._dynamo.reset()
    g = _gen()
    a, b, bias = torch.randn(96, 128, generator=g), torch.randn(128, 256, generator=g), torch.randn(256, generator=g)
    exact, rounded = _refs(a, b, bias)
    if epilogue:  # the product heads a fused group (bias add + ReLU on its tiles)
        exact, rounded = exact.clamp_min(0), rounded.clamp_min(0)
        fn = lambda x, y, z: torch.relu(x @ y + z)  # noqa: E731
    else:
        fn = lambda x, y, z: torch.addmm(z, x, y)  # noqa: E731
    frames = []

    def backend(gm, inputs):
        frames.append(gm)
        from torch_tpu._dynamo_backend import tpu_backend
        return tpu_backend(gm, inputs)

    f = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
    at, bt, zt = a.to("tpu"), b.to("tpu"), bias.to("tpu")
    for setting in ("highest", "medium", "highest", "medium"):
        torch.set_float32_matmul_precision(setting)
        _check(f(at, bt, zt).cpu(), exact, rounded, BF16 and setting == "medium")
    # dynamo guards on the global setting: one graph per setting, reused when it comes back
    assert len(frames) == 2
    # a precision() block is invisible to dynamo: the "medium" graph runs, in float32
    with torch.tpu.precision(P.HIGHEST):
        _check(f(at, bt, zt).cpu(), exact, rounded, False)
    torch.set_float32_matmul_precision("highest")
    with torch.tpu.precision(P.DEFAULT):  # and the "highest" graph in bfloat16
        _check(f(at, bt, zt).cpu(), exact, rounded, BF16)
    assert len(frames) == 2

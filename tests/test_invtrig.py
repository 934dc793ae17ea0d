"""Inverse trigonometric and related pointwise ops with native kernels
(runtime/kernels/elementwise.c): asin, acos, atan, asinh, acosh, atanh, atan2,
angle, fmax, fmin; and cummax/cummin (their _cummax_helper/_cummin_helper in
runtime/kernels/reduce.c). Each is compared with PyTorch's CPU result,
functional, out= and in-place where ATen has them, on the dtypes the CPU
accepts, with +-1, +-inf, NaN, signed zeros and large values among the
inputs, strided and broadcast operands; none may reach the CPU fallback."""
import pytest
import torch

import torch_tpu
from conftest import DRIVER
from pointwise_util import assert_no_fallback, check_binary, check_out_and_inplace, inputs

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]

# (name, functional, in-place method name or None)
UNARY = [
    ("asin", torch.asin, "asin_"),
    ("acos", torch.acos, "acos_"),
    ("atan", torch.atan, "atan_"),
    ("asinh", torch.asinh, "asinh_"),
    ("acosh", torch.acosh, "acosh_"),
    ("atanh", torch.atanh, "atanh_"),
    ("angle", torch.angle, None),
]

EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.999, -0.999, 1.0001, 1.5, -1.5, 2.0, 10.0, -10.0, 1e-8, -1e-8,
         1e4, -1e4, 1e10, -1e30, float("inf"), float("-inf"), float("nan")]


def _inputs(dtype):
    return inputs(dtype, EDGES, -3, 3)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name,fn,inplace", UNARY, ids=[o[0] for o in UNARY])
def test_unary(name, fn, inplace, dtype):
    torch_tpu.reset_fallback_report()
    x = _inputs(dtype)
    want = fn(x)
    xt = x.to("tpu")
    got = fn(xt)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(fn(xt[::3]).cpu(), fn(x[::3]), equal_nan=True)
    if x.numel() >= 60:  # a transposed 2-d view
        torch.testing.assert_close(fn(xt[:60].reshape(6, 10).t()).cpu(), fn(x[:60].reshape(6, 10).t()),
                                   equal_nan=True)
    check_out_and_inplace(fn, inplace, x, want)
    assert_no_fallback(name)


def test_signed_zeros_and_edges():
    """Signs of zero results and the exact values at the domain edges, as the CPU."""
    torch_tpu.reset_fallback_report()
    for dtype in FLOATS:
        x = torch.tensor(EDGES, dtype=dtype)
        for name, fn, _ in UNARY:
            want, got = fn(x), fn(x.to("tpu")).cpu()
            torch.testing.assert_close(got, want, equal_nan=True)
            zero = want == 0
            assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero])), (name, dtype)
    assert_no_fallback("asin", "acos", "atan", "asinh", "acosh", "atanh", "angle")


@pytest.mark.parametrize("name,fn,inplace", UNARY, ids=[o[0] for o in UNARY])
def test_integer_out_is_rejected(name, fn, inplace):
    x = _inputs(torch.float32)
    with pytest.raises(RuntimeError):
        fn(x, out=torch.empty(x.shape, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        fn(x.to("tpu"), out=torch.empty(x.shape, dtype=torch.int64, device="tpu"))


# (name, functional, in-place method name or None, float-only result)
BINARY = [
    ("atan2", torch.atan2, "atan2_", True),
    ("fmax", torch.fmax, None, False),
    ("fmin", torch.fmin, None, False),
]

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, -1e30, float("inf"), float("-inf"), float("nan")]


def _pair(dtype):
    if not dtype.is_floating_point:
        return _inputs(dtype), _inputs(dtype).flip(0)
    s = torch.tensor(_SPECIAL, dtype=torch.float64)
    a = torch.cat([s.repeat_interleave(len(_SPECIAL)), torch.randn(200, dtype=torch.float64) * 3])
    b = torch.cat([s.repeat(len(_SPECIAL)), torch.randn(200, dtype=torch.float64) * 3])
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name,fn,inplace,float_only", BINARY, ids=[o[0] for o in BINARY])
def test_binary(name, fn, inplace, float_only, dtype):
    torch_tpu.reset_fallback_report()
    a, b = _pair(dtype)
    check_binary(fn, inplace, a, b, float_only)
    assert_no_fallback(name)


@pytest.mark.parametrize("name,fn,inplace,float_only", BINARY, ids=[o[0] for o in BINARY])
def test_binary_mixed_dtypes_and_out(name, fn, inplace, float_only):
    torch_tpu.reset_fallback_report()
    pairs = [(torch.float16, torch.bfloat16), (torch.int32, torch.float16), (torch.int64, torch.uint8),
             (torch.bool, torch.int8), (torch.float32, torch.float64), (torch.bool, torch.bool)]
    for da, db in pairs:
        a, b = _pair(torch.float32)
        a, b = (a * 7).nan_to_num(0).clamp(-100, 100).to(da), (b * 7).nan_to_num(0).clamp(-100, 100).to(db)
        want = fn(a, b)
        got = fn(a.to("tpu"), b.to("tpu"))
        assert got.dtype == want.dtype, (da, db)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    # out= of a dtype the result cannot be cast to raises as on the CPU
    a, b = _pair(torch.float32)
    with pytest.raises(RuntimeError):
        fn(a, b, out=torch.empty(a.shape, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        fn(a.to("tpu"), b.to("tpu"), out=torch.empty(a.shape, dtype=torch.int64, device="tpu"))
    # a wider out= is written in its dtype
    out = torch.empty(a.shape, dtype=torch.float64, device="tpu")
    fn(a.to("tpu"), b.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), fn(a, b, out=torch.empty(a.shape, dtype=torch.float64)), equal_nan=True)
    assert_no_fallback(name)


# ---- cummax / cummin -----------------------------------------------------------


def _no_cum_fallback():
    # on pjrt the helpers (which return nothing) are never staged: the CPU fallback
    if DRIVER == "host":
        assert_no_fallback("_cummax_helper", "_cummin_helper")


def _cum_inputs(dtype):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(5, 7, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0 if dtype == torch.uint8 else -5, 6, (5, 7), generator=g, dtype=dtype)
    x = (torch.randn(5, 7, generator=g, dtype=torch.float64) * 3).round()  # ties
    x[1, 2] = float("nan")
    x[3, 4:6] = float("nan")
    x[2, 3] = -0.0
    x[4, 0] = float("inf")
    x[0, 5] = float("-inf")
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_cummax_cummin(fn, dtype):
    torch_tpu.reset_fallback_report()
    x = _cum_inputs(dtype)
    xt = x.to("tpu")
    views = [(x, xt), (x.t(), xt.t()), (x[:, ::2], xt[:, ::2]), (x[0], xt[0]), (x[:0], xt[:0])]
    for xc, xd in views:
        for dim in range(-xc.dim(), xc.dim()):
            want = fn(xc, dim)
            got = fn(xd, dim)
            torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
            torch.testing.assert_close(got.indices.cpu(), want.indices)
    # 0-dim, out=, and a large row (several pool workers)
    s = x.flatten()[0]
    torch.testing.assert_close(fn(s.to("tpu"), 0).values.cpu(), fn(s, 0).values)
    v = torch.empty(0, dtype=dtype, device="tpu")
    i = torch.empty(0, dtype=torch.long, device="tpu")
    fn(xt, 1, out=(v, i))
    want = fn(x, 1)
    torch.testing.assert_close(v.cpu(), want.values, equal_nan=True)
    torch.testing.assert_close(i.cpu(), want.indices)
    big = x.flatten().repeat(600).reshape(600, 35)
    for dim in range(big.dim()):
        want = fn(big, dim)
        got = fn(big.to("tpu"), dim)
        torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
        torch.testing.assert_close(got.indices.cpu(), want.indices)
    _no_cum_fallback()


def test_cummax_grad():
    torch_tpu.reset_fallback_report()
    x = torch.randn(4, 6, dtype=torch.float64)
    xt = x.to("tpu").requires_grad_()
    xc = x.clone().requires_grad_()
    for fn in (torch.cummax, torch.cummin):
        fn(xc, 1).values.sum().backward()
        fn(xt, 1).values.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    _no_cum_fallback()


def test_cummax_wrong_out_dtype_raises():
    x = torch.randn(3, 4)
    for dev in ("cpu", "tpu"):
        with pytest.raises(RuntimeError):
            torch.cummax(x.to(dev), 0, out=(torch.empty(0, device=dev, dtype=torch.float64),
                                            torch.empty(0, device=dev, dtype=torch.long)))
        with pytest.raises(RuntimeError):
            torch.cummin(x.to(dev), 0, out=(torch.empty(0, device=dev), torch.empty(0, device=dev)))

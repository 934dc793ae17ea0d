"""Special functions with native kernels (runtime/kernels/special.c): lgamma,
digamma, polygamma, erfc, erfcx, cosh, sinh, i0, i0e, i1, i1e; and torch.equal (a
decomposition in torch_tpu/_decomp.py). Each is compared with PyTorch's CPU
result, functional, out= and in-place, on the dtypes the CPU accepts, with
poles, infinities and NaNs among the inputs; none may reach the CPU
fallback."""
import pytest
import torch

import torch_tpu
from pointwise_util import assert_no_fallback, check_out_and_inplace, inputs

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.uint8, torch.bool]

# (name, functional, in-place method name or None, dtypes the CPU rejects)
OPS = [
    ("lgamma", torch.lgamma, "lgamma_", ()),
    ("digamma", torch.digamma, "digamma_", ()),
    ("erfc", torch.erfc, "erfc_", ()),
    ("special_erfcx", torch.special.erfcx, None, (torch.float16, torch.bfloat16)),
    ("cosh", torch.cosh, "cosh_", ()),
    ("sinh", torch.sinh, "sinh_", ()),
    ("i0", torch.i0, "i0_", ()),
    ("special_i0e", torch.special.i0e, None, ()),
    ("special_i1", torch.special.i1, None, ()),
    ("special_i1e", torch.special.i1e, None, ()),
]

EDGES = [0.0, -0.0, -1.0, -2.0, -3.0, -0.5, -2.5, -3.75, 0.5, 1.0, 1.5, 2.0, 1e-8, 1e-3, 5.0, 9.5, 10.0, 10.5,
         30.0, -30.0, 100.0, 1e4, 1e10, float("inf"), float("-inf"), float("nan")]


def _inputs(dtype):
    return inputs(dtype, EDGES, -12, 12)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name,fn,inplace,rejected", OPS, ids=[o[0] for o in OPS])
def test_unary(name, fn, inplace, rejected, dtype):
    torch_tpu.reset_fallback_report()
    x = _inputs(dtype)
    if dtype in rejected:
        with pytest.raises(RuntimeError):
            fn(x)
        with pytest.raises(RuntimeError):
            fn(x.to("tpu")).cpu()
        return
    want = fn(x)
    xt = x.to("tpu")
    torch.testing.assert_close(fn(xt).cpu(), want, equal_nan=True)
    # strided input: against the contiguous CPU result (the CPU's own strided
    # float16/bfloat16 i0e takes a scalar path one ulp off its vectorized one)
    torch.testing.assert_close(fn(xt[::3]).cpu(), want[::3], equal_nan=True)
    check_out_and_inplace(fn, inplace, x, want)
    assert_no_fallback(name)


@pytest.mark.parametrize("name,fn,inplace,rejected", OPS, ids=[o[0] for o in OPS])
def test_integer_out_is_rejected(name, fn, inplace, rejected):
    x = _inputs(torch.float32)
    with pytest.raises(RuntimeError):
        fn(x, out=torch.empty(x.shape, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        fn(x.to("tpu"), out=torch.empty(x.shape, dtype=torch.int64, device="tpu"))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5])
def test_polygamma(n, dtype):
    torch_tpu.reset_fallback_report()
    x = _inputs(dtype)
    want = torch.polygamma(n, x)
    xt = x.to("tpu")
    torch.testing.assert_close(torch.polygamma(n, xt).cpu(), want, equal_nan=True)
    torch.testing.assert_close(torch.special.polygamma(n, xt).cpu(), want, equal_nan=True)
    out = torch.empty(x.shape, dtype=want.dtype, device="tpu")
    torch.polygamma(n, xt, out=out)
    torch.testing.assert_close(out.cpu(), want, equal_nan=True)
    if dtype.is_floating_point:
        y = x.to("tpu")
        y.polygamma_(n)
        torch.testing.assert_close(y.cpu(), want, equal_nan=True)
    assert_no_fallback("polygamma")


def test_polygamma_negative_order_raises():
    x = torch.rand(4)
    with pytest.raises(RuntimeError, match="negative n"):
        torch.polygamma(-1, x)
    with pytest.raises(RuntimeError, match="negative n"):
        torch.polygamma(-1, x.to("tpu")).cpu()


def test_aliases_and_large():
    torch_tpu.reset_fallback_report()
    x = torch.randn(70000, dtype=torch.float32) * 5
    xt = x.to("tpu")
    for f in (torch.special.gammaln, torch.special.digamma, torch.special.psi, torch.special.erfc,
              torch.special.erfcx):
        torch.testing.assert_close(f(xt).cpu(), f(x), equal_nan=True)
    torch.testing.assert_close(torch.polygamma(3, xt.reshape(700, 100).t()).cpu(),
                               torch.polygamma(3, x.reshape(700, 100).t()), equal_nan=True)
    for name in ("lgamma", "digamma", "polygamma", "erfc", "special_erfcx"):
        assert_no_fallback(name)


def test_equal():
    torch_tpu.reset_fallback_report()
    a = torch.tensor([1.0, 2.0, 3.0])
    nan = torch.tensor([1.0, float("nan")])
    pairs = [
        (a, a.clone()),
        (a, torch.tensor([1.0, 2.0, 4.0])),
        (a, torch.tensor([1.0, 2.0])),  # sizes differ
        (torch.zeros(2, 3), torch.zeros(3, 2)),
        (torch.zeros(6), torch.zeros(2, 3)),  # same numel, other shape
        (torch.tensor(1.0), torch.tensor([1.0])),  # 0-d vs 1-d
        (nan, nan),  # NaN is never equal, not even to itself
        (nan, nan.clone()),
        (torch.empty(0), torch.empty(0)),
        (torch.empty(0, 2), torch.empty(0)),
        (torch.tensor([1.0]), torch.tensor([1])),  # dtypes promote
        (torch.tensor([1]), torch.tensor([1.5])),
        (torch.tensor([True]), torch.tensor([1])),
        (torch.tensor([1.1], dtype=torch.bfloat16), torch.tensor([1.1])),
        (torch.tensor([300]), torch.tensor([44], dtype=torch.uint8)),
        (torch.tensor([1.0, 2.0]).expand(2, 2), torch.tensor([[1.0, 2.0], [1.0, 2.0]])),
        (torch.arange(12.0).reshape(3, 4).t(), torch.arange(12.0).reshape(3, 4).t().contiguous()),
    ]
    for x, y in pairs:
        want = torch.equal(x, y)
        got = torch.equal(x.to("tpu"), y.to("tpu"))
        assert isinstance(got, bool)
        assert got == want, (x, y, got, want)
    t = nan.to("tpu")
    assert torch.equal(t, t) is torch.equal(nan, nan)
    assert_no_fallback("equal")

"""median and nanmedian on native kernels (runtime/kernels/reduce.c), of the
whole input and along a dim, against PyTorch's CPU: values equal to the
CPU's; indices pointing at an element equal to it (tests/test_select2.py
checks that they are the CPU's own, ties included). None may reach the CPU
fallback."""
import pytest
import torch

import torch_tpu
from pointwise_util import assert_no_fallback

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
OPS = [torch.median, torch.nanmedian]


def _inputs(dtype, shape=(6, 11), seed=0):
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -20
        return torch.randint(lo, 20, shape, generator=g, dtype=dtype)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 4).round()  # ties
    x[1, 3] = float("nan")
    x[2, :] = float("nan")  # an all-NaN row
    x[4, ::2] = float("nan")
    x[0, 0], x[0, 1], x[5, 2] = float("inf"), float("-inf"), -0.0
    return x.to(dtype)


def _check_dim(fn, x, dim, keepdim):
    """Values as on the CPU, indices pointing at them."""
    want = fn(x, dim, keepdim=keepdim)
    got = fn(x.to("tpu"), dim, keepdim=keepdim)
    vals, idx = got.values.cpu(), got.indices.cpu()
    torch.testing.assert_close(vals, want.values, equal_nan=True, rtol=0, atol=0)
    assert idx.shape == want.indices.shape
    if x.dim() == 0:
        assert idx.item() == 0
        return
    picked = x.gather(dim, idx if keepdim else idx.unsqueeze(dim))
    torch.testing.assert_close(picked if keepdim else picked.squeeze(dim), vals, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("fn", OPS, ids=["median", "nanmedian"])
def test_median(fn, dtype):
    torch_tpu.reset_fallback_report()
    x = _inputs(dtype)
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True, rtol=0, atol=0)
    for view in (x, x.t(), x[:, ::3], x[0], x[0, 0]):
        torch.testing.assert_close(fn(view.to("tpu")).cpu(), fn(view), equal_nan=True, rtol=0, atol=0)
        for dim in range(-max(view.dim(), 1), max(view.dim(), 1)):
            for keepdim in (False, True):
                _check_dim(fn, view, dim, keepdim)
    # out=
    v = torch.empty(0, dtype=dtype, device="tpu")
    i = torch.empty(0, dtype=torch.long, device="tpu")
    fn(x.to("tpu"), 1, out=(v, i))
    torch.testing.assert_close(v.cpu(), fn(x, 1).values, equal_nan=True, rtol=0, atol=0)
    # a long row and many rows (the pool splits the rows)
    big = _inputs(dtype, (300, 257), seed=1)
    for dim in (0, 1):
        _check_dim(fn, big, dim, False)
    torch.testing.assert_close(fn(big.to("tpu")).cpu(), fn(big), equal_nan=True, rtol=0, atol=0)
    assert_no_fallback("median", "nanmedian")


def test_unique_median_indices_match_the_cpu():
    torch_tpu.reset_fallback_report()
    x = torch.randn(40, 33, dtype=torch.float64)  # no ties
    x[3, 5] = float("nan")
    for fn in OPS:
        for dim in (0, 1):
            want, got = fn(x, dim), fn(x.to("tpu"), dim)
            finite = ~want.values.isnan()
            torch.testing.assert_close(got.indices.cpu()[finite], want.indices[finite])
    # median of a row with a NaN is its first NaN, as on the CPU
    r = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    assert torch.median(r.to("tpu"), 0).indices.item() == torch.median(r, 0).indices.item() == 1
    assert_no_fallback("median", "nanmedian")


def test_median_grad():
    torch_tpu.reset_fallback_report()
    x = torch.randn(5, 7, dtype=torch.float64)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    for fn in OPS:
        fn(xc, 1).values.sum().backward()
        fn(xt, 1).values.sum().backward()
        fn(xc).backward()
        fn(xt).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    assert_no_fallback("median", "nanmedian")


def test_median_errors_as_on_the_cpu():
    for dev in ("cpu", "tpu"):
        with pytest.raises(IndexError, match="non-zero size"):
            torch.median(torch.empty(2, 0, device=dev), 1)
        with pytest.raises(RuntimeError):
            torch.median(torch.tensor([True, False], device=dev))
        with pytest.raises(RuntimeError):
            torch.nanmedian(torch.randn(3, 4, device=dev), 0,
                            out=(torch.empty(0, device=dev, dtype=torch.float64), torch.empty(0, device=dev,
                                                                                               dtype=torch.long)))
    empty = torch.empty(0)
    assert torch.nanmedian(empty.to("tpu")).isnan().item() and torch.nanmedian(empty).isnan().item()

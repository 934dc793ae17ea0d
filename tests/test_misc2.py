"""addbmm (runtime/kernels/linalg.c), _logcumsumexp (reduce.c), cdist and
pdist with their backward (misc.c) on native kernels, against PyTorch's CPU:
every dtype the CPU accepts (and its errors for the others), broadcast and
strided operands, empty inputs, out= and in-place overloads, alpha/beta,
infinities and NaN, every p of the distances, and gradients. With
TORCH_TPU_FALLBACK=error in force: none may reach the CPU fallback."""
import pytest
import torch

import torch_tpu
from pointwise_util import assert_no_fallback

pytestmark = pytest.mark.usefixtures("no_fallback")
INF, NAN = float("inf"), float("nan")


def _t(x):
    return x.to("tpu")


def _rand(shape, dtype, g):
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g).to(dtype)


# ---- addbmm --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_addbmm(dtype):
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(0)
    a, b = _rand((4, 5, 6), dtype, g), _rand((4, 6, 7), dtype, g)
    floating = dtype.is_floating_point
    scalars = [{}, dict(beta=0.5, alpha=2.0) if floating else dict(beta=2, alpha=3), dict(beta=0)]
    for self in (_rand((5, 7), dtype, g), _rand((7,), dtype, g), _rand((), dtype, g), _rand((5, 1), dtype, g)):
        for kw in scalars:
            want = torch.addbmm(self, a, b, **kw)
            got = torch.addbmm(_t(self), _t(a), _t(b), **kw)
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got.cpu(), want)
    nan_self = torch.full((5, 7), NAN).to(dtype) if floating else _rand((5, 7), dtype, g)
    # beta = 0 ignores self (its NaNs too); strided and transposed batches
    torch.testing.assert_close(torch.addbmm(_t(nan_self), _t(a), _t(b), beta=0).cpu(),
                               torch.addbmm(nan_self, a, b, beta=0))
    at, bt = a.transpose(1, 2).contiguous().transpose(1, 2), b[:, :, ::1].permute(0, 2, 1).contiguous().permute(0, 2, 1)
    torch.testing.assert_close(torch.addbmm(_t(nan_self), _t(at)[::2], _t(bt)[::2], beta=0).cpu(),
                               torch.addbmm(nan_self, at[::2], bt[::2], beta=0))
    # out= and in-place
    self = _rand((5, 7), dtype, g)
    want = torch.addbmm(self, a, b)
    out = torch.empty(5, 7, dtype=dtype, device="tpu")
    torch.addbmm(_t(self), _t(a), _t(b), out=out)
    torch.testing.assert_close(out.cpu(), want)
    y = _t(self)
    y.addbmm_(_t(a), _t(b))
    torch.testing.assert_close(y.cpu(), want)
    # no batches: beta * self (zeros for beta = 0)
    for beta in (2, 0):
        torch.testing.assert_close(torch.addbmm(_t(self), _t(a[:0]), _t(b[:0]), beta=beta).cpu(),
                                   torch.addbmm(self, a[:0], b[:0], beta=beta))
    assert_no_fallback("addbmm")


def test_addbmm_float32_equals_cpu_and_grad():
    """Each batch's product is added into the output, as the CPU's addmm_ per
    batch. The CPU's own bits depend on which MKL kernel its processor gets
    (they matched ours on Intel, not on AMD EPYC), so float32 is compared
    within the error bound of a float32 sum."""
    g = torch.Generator().manual_seed(1)
    s, a, b = (torch.randn(sh, generator=g) * 9 for sh in [(5, 10), (5, 5, 5), (5, 5, 10)])
    # the error bound of a float32 sum: a few ulps of the sum of |terms|
    bound = 4 * torch.finfo(torch.float32).eps * (s.abs() + (a.abs() @ b.abs()).sum(0)).max().item()
    torch.testing.assert_close(torch.addbmm(_t(s), _t(a), _t(b)).cpu(), torch.addbmm(s, a, b), rtol=0, atol=bound)
    leaves = [x.clone().requires_grad_() for x in (s, a, b)]
    tl = [_t(x).detach().requires_grad_() for x in (s, a, b)]
    gw = torch.autograd.grad(torch.addbmm(*leaves, beta=0.5, alpha=2).square().sum(), leaves)
    gt = torch.autograd.grad(torch.addbmm(*tl, beta=0.5, alpha=2).square().sum(), tl)
    for x, y in zip(gt, gw):  # the forward's last-ulp differences, squared, at the gradients' scale
        torch.testing.assert_close(x.cpu(), y, rtol=1e-5, atol=8 * torch.finfo(torch.float32).eps * y.abs().max().item())
    assert_no_fallback("addbmm", "bmm", "mm")


def test_addbmm_errors():
    f32, f64 = torch.randn(3, 2, 4), torch.randn(3, 4, 5, dtype=torch.float64)
    for args in [(torch.randn(2, 5), f32, f64),  # mixed dtypes
                 (torch.randn(2, 5, dtype=torch.float64), f32, torch.randn(3, 4, 5)),  # self's dtype
                 (torch.randn(2, 5), f32, torch.randn(2, 4, 5)),  # batch counts
                 (torch.randn(2, 5), f32, torch.randn(3, 3, 5)),  # inner sizes
                 (torch.randn(3, 5), f32, torch.randn(3, 4, 5)),  # self not broadcastable
                 (torch.randn(2, 5), torch.randn(2, 4), torch.randn(4, 5))]:  # 2-D batches
        with pytest.raises((RuntimeError, IndexError)):
            torch.addbmm(*args)
        with pytest.raises((RuntimeError, ValueError, IndexError)):
            torch.addbmm(*[_t(x) for x in args]).cpu()
    with pytest.raises(RuntimeError):  # out= of another dtype
        torch.addbmm(_t(torch.randn(2, 5)), _t(f32), _t(torch.randn(3, 4, 5)),
                     out=torch.empty(2, 5, dtype=torch.float64, device="tpu")).cpu()


# ---- logcumsumexp ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_logcumsumexp(dtype):
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(7, 9, generator=g, dtype=torch.float64) * 20).to(dtype)
    x[1, 3], x[2, 2], x[3, 4], x[4, 0], x[4, 1] = INF, -INF, NAN, -INF, -INF
    x[5, 5], x[5, 6] = INF, INF
    x[6] = -INF  # a row of -inf stays -inf
    for d in (0, 1, -1):
        want = torch.logcumsumexp(x, d)
        got = torch.logcumsumexp(_t(x), d)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(torch.logcumsumexp(_t(x).t(), 1).cpu(), torch.logcumsumexp(x.t(), 1), equal_nan=True)
    torch.testing.assert_close(torch.logcumsumexp(_t(x)[::2, 1::3], 0).cpu(), torch.logcumsumexp(x[::2, 1::3], 0),
                               equal_nan=True)
    big = (torch.randn(3, 4, 200, generator=g, dtype=torch.float64) * 5).to(dtype)
    torch.testing.assert_close(torch.logcumsumexp(_t(big), 2).cpu(), torch.logcumsumexp(big, 2))
    out = torch.empty(7, 9, dtype=dtype, device="tpu")
    torch.logcumsumexp(_t(x), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(x, 1), equal_nan=True)
    z = torch.tensor(-2.5, dtype=dtype)
    torch.testing.assert_close(torch.logcumsumexp(_t(z), 0).cpu(), torch.logcumsumexp(z, 0))
    assert torch.logcumsumexp(_t(torch.empty(0, 3, dtype=dtype)), 0).shape == (0, 3)
    assert_no_fallback("_logcumsumexp", "logcumsumexp")


def test_logcumsumexp_grad_and_errors():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    xc, xt = x.clone().requires_grad_(), _t(x).requires_grad_()
    gw = torch.autograd.grad(torch.logcumsumexp(xc, 1).sin().sum(), xc)[0]
    gt = torch.autograd.grad(torch.logcumsumexp(xt, 1).sin().sum(), xt)[0]
    torch.testing.assert_close(gt.cpu(), gw)
    with pytest.raises(IndexError):
        torch.logcumsumexp(_t(x), 2)
    with pytest.raises(NotImplementedError):  # no integer kernel, as on the CPU
        torch.logcumsumexp(_t(x).long(), 0).cpu()
    with pytest.raises(RuntimeError, match="expected scalar_type"):
        torch.logcumsumexp(_t(x), 0, out=torch.empty(4, 6, device="tpu"))
    assert_no_fallback("_logcumsumexp", "logcumsumexp")


# ---- cdist, pdist ----------------------------------------------------------------

PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("p", PS, ids=str)
def test_cdist(p, dtype):
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(0)
    for s1, s2 in [((5, 4), (7, 4)), ((2, 5, 4), (2, 7, 4)), ((2, 1, 5, 4), (3, 7, 4)), ((0, 4), (3, 4)),
                   ((3, 0), (2, 0)), ((2, 0, 4), (2, 3, 4)), ((30, 3), (27, 3))]:
        x1, x2 = _rand(s1, dtype, g), _rand(s2, dtype, g)
        for mode in ("use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
            torch.testing.assert_close(torch.cdist(_t(x1), _t(x2), p, compute_mode=mode).cpu(),
                                       torch.cdist(x1, x2, p, compute_mode=mode))
        if x1.numel() and x2.numel():
            x1[..., 0, :] = x2[(0,) * (x2.dim() - 2) + (0,)]  # a zero distance
        want = torch.cdist(x1, x2, p)
        got = torch.cdist(_t(x1), _t(x2), p)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
        xt = x1.transpose(-1, -2).contiguous().transpose(-1, -2)
        torch.testing.assert_close(torch.cdist(_t(xt), _t(x2), p).cpu(), want)
    assert_no_fallback("_cdist_forward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("p", PS, ids=str)
def test_pdist(p, dtype):
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(0)
    for n, m in [(0, 3), (1, 3), (2, 3), (7, 5), (6, 0)]:
        x = _rand((n, m), dtype, g)
        if n > 2:
            x[2] = x[0]
        want = torch.pdist(x, p)
        got = torch.pdist(_t(x), p)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(torch.pdist(_t(x.t().contiguous()).t(), p).cpu(), want)
    assert_no_fallback("_pdist_forward")


@pytest.mark.parametrize("p", PS, ids=str)
def test_cdist_pdist_grad(p):
    """Backward of both inputs (x2's is _cdist_backward with the operands
    swapped), with broadcast batches, a zero distance and ties for p = inf."""
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(3)
    x1 = torch.randn(2, 1, 5, 4, generator=g, dtype=torch.float64)
    x2 = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    x1[1, 0, 0] = x2[0, 0]
    w = torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64)
    c1, c2 = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    t1, t2 = _t(x1).requires_grad_(), _t(x2).requires_grad_()
    want = torch.autograd.grad((torch.cdist(c1, c2, p) * w).sum(), (c1, c2))
    got = torch.autograd.grad((torch.cdist(t1, t2, p) * _t(w)).sum(), (t1, t2))
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu(), b)
    x = torch.randint(-3, 4, (6, 3), generator=g).double()  # ties: p = inf has several maxima
    x[3] = x[1]
    c, t = x.clone().requires_grad_(), _t(x).requires_grad_()
    v = torch.randn(15, generator=g, dtype=torch.float64)
    want = torch.autograd.grad((torch.pdist(c, p) * v).sum(), c)[0]
    got = torch.autograd.grad((torch.pdist(t, p) * _t(v)).sum(), t)[0]
    torch.testing.assert_close(got.cpu(), want)
    assert_no_fallback("_cdist_forward", "_cdist_backward", "_pdist_forward", "_pdist_backward")


def test_cdist_pdist_errors():
    a = torch.ops.aten
    cases = [lambda d: a._cdist_forward(torch.randn(3, device=d), torch.randn(3, 3, device=d), 2.0, None),
             lambda d: a._cdist_forward(torch.randn(2, 3, device=d), torch.randn(3, 4, device=d), 2.0, None),
             lambda d: a._cdist_forward(torch.ones(2, 3, device=d).long(), torch.ones(3, 3, device=d).long(), 2.0,
                                        None),
             lambda d: a._cdist_forward(torch.randn(2, 3, device=d), torch.randn(3, 3, device=d), -1.0, None),
             lambda d: a._cdist_forward(torch.randn(2, 3, device=d), torch.randn(3, 3, device=d).double(), 2.0, None),
             lambda d: a._cdist_forward(torch.randn(2, 3, device=d).half(), torch.randn(3, 3, device=d).half(), 2.0,
                                        None),
             lambda d: torch.pdist(torch.randn(3, device=d)),
             lambda d: torch.pdist(torch.randn(3, 4, device=d).half())]
    for f in cases:
        with pytest.raises(Exception) as cpu:
            f("cpu")
        with pytest.raises(Exception) as tpu:
            f("tpu").cpu()
        assert isinstance(tpu.value, (RuntimeError, ValueError, NotImplementedError, IndexError)), (cpu.value, tpu.value)
    with pytest.raises((RuntimeError, ValueError), match="non-negative p"):
        a._cdist_forward(_t(torch.randn(2, 3)), _t(torch.randn(3, 3)), -1.0, None)


# ---- adaptive average pooling ---------------------------------------------------

_ADAPTIVE = [((2, 3, 5, 7, 6), (2, 3, 4)), ((3, 4, 4, 4), (4, 4, 4)), ((1, 2, 7, 5, 9), (3, 1, 5)),
             ((2, 3, 5, 7, 6), (7, 9, 11)), ((2, 1, 4, 4, 4), (1, 1, 1))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_adaptive_avg_pool(dtype):
    """3-d forward, 2-d and 3-d backward: output windows that overlap, sizes
    larger than the input, a single output, batched and unbatched, a
    transposed input. float16/bfloat16 sum and divide in the dtype step by
    step, as the CPU: equal to the bit."""
    torch_tpu.reset_fallback_report()
    F, a = torch.nn.functional, torch.ops.aten
    g = torch.Generator().manual_seed(4)
    exact = dtype in (torch.bfloat16, torch.float16)
    check = (lambda x, y: torch.testing.assert_close(x, y, rtol=0, atol=0)) if exact else torch.testing.assert_close
    for shape, osz in _ADAPTIVE:
        x = torch.randn(shape, generator=g).to(dtype)
        check(F.adaptive_avg_pool3d(_t(x), osz).cpu(), F.adaptive_avg_pool3d(x, osz))
        xt = x.transpose(-1, -3)
        check(F.adaptive_avg_pool3d(_t(x).transpose(-1, -3), osz).cpu(), F.adaptive_avg_pool3d(xt, osz))
        go = torch.randn(F.adaptive_avg_pool3d(x, osz).shape, generator=g).to(dtype)
        check(a._adaptive_avg_pool3d_backward(_t(go), _t(x)).cpu(), a._adaptive_avg_pool3d_backward(go, x))
        x2 = x.flatten(-3, -2)
        go2 = torch.randn(F.adaptive_avg_pool2d(x2, osz[1:]).shape, generator=g).to(dtype)
        check(a._adaptive_avg_pool2d_backward(_t(go2), _t(x2)).cpu(), a._adaptive_avg_pool2d_backward(go2, x2))
    if dtype == torch.float64:  # autograd reaches the backward kernels
        x = torch.randn(2, 3, 5, 7, 6, generator=g, dtype=dtype)
        w = torch.randn(2, 3, 3, 2, 4, generator=g, dtype=dtype)
        c, t = x.clone().requires_grad_(), _t(x).requires_grad_()
        want = torch.autograd.grad((F.adaptive_avg_pool3d(c, (3, 2, 4)) * w).sum(), c)[0]
        got = torch.autograd.grad((F.adaptive_avg_pool3d(t, (3, 2, 4)) * _t(w)).sum(), t)[0]
        torch.testing.assert_close(got.cpu(), want)
    out = torch.empty(2, 3, 2, 3, 4, dtype=dtype, device="tpu")
    x = torch.randn(2, 3, 5, 7, 6, generator=g).to(dtype)
    a._adaptive_avg_pool3d.out(_t(x), [2, 3, 4], out=out)
    check(out.cpu(), F.adaptive_avg_pool3d(x, (2, 3, 4)))
    assert_no_fallback("_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward", "_adaptive_avg_pool2d_backward")


def test_adaptive_avg_pool_errors():
    F = torch.nn.functional
    with pytest.raises(RuntimeError):  # integers: no kernel on the CPU either
        F.adaptive_avg_pool3d(torch.ones(1, 2, 2, 2, dtype=torch.int64), 1)
    with pytest.raises((RuntimeError, NotImplementedError)):
        F.adaptive_avg_pool3d(_t(torch.ones(1, 2, 2, 2, dtype=torch.int64)), 1).cpu()
    with pytest.raises((RuntimeError, IndexError)):  # a 2-D input
        F.adaptive_avg_pool3d(torch.ones(2, 2), 1)
    with pytest.raises((RuntimeError, IndexError)):
        F.adaptive_avg_pool3d(_t(torch.ones(2, 2)), 1).cpu()


# ---- segment_reduce ---------------------------------------------------------------

_REDUCE = ["sum", "mean", "max", "min", "prod", "amax", "amin"]


def _seg(data, reduce, **kw):
    """segment_reduce on tpu and on the CPU: equal to the bit (NaN where NaN)."""
    want = torch.segment_reduce(data, reduce, **kw)
    got = torch.segment_reduce(_t(data), reduce, **{k: _t(v) if isinstance(v, torch.Tensor) else v
                                                     for k, v in kw.items()})
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reduce", _REDUCE)
def test_segment_reduce(reduce, dtype):
    """Empty segments (their initial value, NaN for mean), NaN, initial=,
    int32 and int64 lengths, offsets, axis > 0 with per-row lengths, strided
    data and long segments."""
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(5)
    d = torch.tensor([1.0, NAN, 3.0, 4.0, -2.0, 5.0, INF, -1.0]).to(dtype)
    lengths = torch.tensor([2, 0, 3, 1, 2])
    _seg(d, reduce, lengths=lengths)
    _seg(d, reduce, lengths=lengths.int(), initial=7.0)
    _seg(d, reduce, offsets=torch.tensor([0, 2, 2, 5, 6, 8]))
    _seg(d[2:], reduce, offsets=torch.tensor([1, 3, 3, 6]), unsafe=True)
    x = torch.randn(3, 10, 4, generator=g).to(dtype)
    _seg(x, reduce, lengths=torch.tensor([[3, 3, 4], [0, 10, 0], [1, 2, 7]]), axis=1)
    _seg(x, reduce, offsets=torch.tensor([[0, 3, 6, 10], [0, 0, 10, 10], [0, 1, 3, 10]]), axis=1, initial=-1.5)
    x0 = torch.randn(10, 3, 2, generator=g).to(dtype)
    _seg(x0, reduce, lengths=torch.tensor([4, 0, 6]))
    _seg(x0.transpose(1, 2), reduce, lengths=torch.tensor([4, 0, 6]), axis=0)
    _seg(torch.randn(4, 300, generator=g).to(dtype), reduce, lengths=torch.tensor([[100, 200]] * 4), axis=1)
    assert_no_fallback("segment_reduce")


def test_segment_reduce_errors():
    def both(fn, exc):
        with pytest.raises(exc):
            fn("cpu")
        with pytest.raises((exc, ValueError)):
            fn("tpu").cpu()

    ones = lambda d: torch.ones(4, device=d)  # noqa: E731
    ln = lambda v, d: torch.tensor(v, device=d)  # noqa: E731
    both(lambda d: torch.segment_reduce(ones(d), "sum", lengths=ln([2, 1], d)), RuntimeError)  # sums to 3, not 4
    both(lambda d: torch.segment_reduce(ones(d), "sum", lengths=ln([2, -1, 3], d)), RuntimeError)
    both(lambda d: torch.segment_reduce(ones(d), "sum", offsets=ln([0, 3, 2, 4], d)), RuntimeError)
    both(lambda d: torch.segment_reduce(ones(d), "median", lengths=ln([2, 2], d)), RuntimeError)
    both(lambda d: torch.segment_reduce(ones(d).long(), "sum", lengths=ln([2, 2], d)), NotImplementedError)
    with pytest.raises(ValueError, match="outside"):  # unsafe=True past the end: an error, not a read beyond data
        torch.segment_reduce(_t(torch.ones(4)), "sum", lengths=_t(torch.tensor([2, 5])), unsafe=True).cpu()
    assert_no_fallback("segment_reduce")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_backward(reduce, dtype):
    """_segment_reduce_backward bit for bit: ties of max/min with grads of
    both signs, zeros, NaN and inf for prod, initial=, offsets, axis 1; and
    autograd through segment_reduce on tpu."""
    torch_tpu.reset_fallback_report()
    bwd = torch.ops.aten._segment_reduce_backward
    g = torch.Generator().manual_seed(6)
    d = torch.tensor([1.0, 3.0, 3.0, 2.0, 0.0, 4.0, 0.0, 5.0, 2.0, NAN, 1.0, INF, 2.0, 0.0, 0.0, 7.0]).to(dtype)
    lengths = torch.tensor([3, 2, 2, 0, 1, 3, 2, 3])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    cases = [(d, dict(lengths=lengths)), (d, dict(lengths=lengths, initial=2.0)), (d, dict(offsets=offsets)),
             (torch.randn(3, 10, 4, generator=g).to(dtype), dict(lengths=torch.tensor([[3, 3, 4], [0, 10, 0], [1, 2, 7]]),
                                                                 axis=1))]
    for x, kw in cases:
        out = torch.segment_reduce(x, reduce, **kw)
        for sign in (1, -1):
            gr = (torch.rand(out.shape, generator=g) * sign).to(dtype)
            want = bwd(gr, out, x, reduce, **kw)
            got = bwd(_t(gr), _t(out), _t(x), reduce, **{k: _t(v) if isinstance(v, torch.Tensor) else v
                                                         for k, v in kw.items()})
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
    if dtype == torch.float64:
        x = torch.randn(12, 3, generator=g, dtype=dtype)
        c, t = x.clone().requires_grad_(), _t(x).requires_grad_()
        lc = torch.tensor([5, 0, 7])
        want = torch.autograd.grad(torch.segment_reduce(c, reduce, lengths=lc).sum(), c)[0]
        got = torch.autograd.grad(torch.segment_reduce(t, reduce, lengths=_t(lc)).sum(), t)[0]
        torch.testing.assert_close(got.cpu(), want)
    assert_no_fallback("segment_reduce", "_segment_reduce_backward")


# ---- embedding_bag ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
def test_embedding_bag(mode, dtype):
    """_embedding_bag and _embedding_bag_forward_only: an empty bag, padding_idx,
    include_last_offset, per-sample weights, int32 and int64 indices; the
    bag ids, sizes and argmax rows equal the CPU's wherever the meta function
    sizes them as the CPU does (it sizes offset2bag N and max_indices 0 for
    mode sum, the CPU 0 and B)."""
    torch_tpu.reset_fallback_report()
    a = torch.ops.aten
    g = torch.Generator().manual_seed(7)
    w = torch.randn(10, 3, generator=g).to(dtype)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    for fn in (a._embedding_bag_forward_only, a._embedding_bag):
        for pad in (-1, 2):
            for last in (False, True):
                offs = torch.tensor([0, 4, 4, 6, 8]) if last else torch.tensor([0, 4, 4, 6])
                for psw in ([None, torch.rand(8, generator=g).to(dtype)] if mode == 0 else [None]):
                    for it in (torch.int64, torch.int32):
                        args = (w, idx.to(it), offs.to(it), False, mode, False, psw, last, pad)
                        want = fn(*args)
                        got = fn(*[_t(x) if isinstance(x, torch.Tensor) else x for x in args])
                        torch.testing.assert_close(got[0].cpu(), want[0])
                        for x, y in zip(want[1:], got[1:]):
                            assert y.dtype == x.dtype
                            if x.shape == y.shape:
                                assert torch.equal(y.cpu(), x)
    ww = torch.randn(20, 5, generator=g).to(dtype)
    name = ["sum", "mean", "max"][mode]
    ii = torch.randint(0, 20, (4, 6), generator=g)
    F = torch.nn.functional
    torch.testing.assert_close(F.embedding_bag(_t(ii), _t(ww), mode=name).cpu(), F.embedding_bag(ii, ww, mode=name))
    torch.testing.assert_close(F.embedding_bag(_t(ii), _t(ww), mode=name, padding_idx=3).cpu(),
                               F.embedding_bag(ii, ww, mode=name, padding_idx=3))
    assert_no_fallback("_embedding_bag", "_embedding_bag_forward_only")


def test_embedding_bag_errors():
    F = torch.nn.functional
    for f in (lambda d: F.embedding_bag(torch.tensor([1, 20], device=d), torch.randn(20, 3, device=d),
                                        torch.tensor([0], device=d)),
              lambda d: F.embedding_bag(torch.tensor([1, 2], device=d), torch.randn(20, 3, device=d),
                                        torch.tensor([1], device=d))):
        with pytest.raises(RuntimeError):
            f("cpu")
        with pytest.raises(ValueError, match="out of range|offsets must start at 0"):
            f("tpu").cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_grad(mode, dtype):
    """Gradients of weight (padding rows, an empty bag, frequency scaling) and
    of per_sample_weights, through _embedding_bag_backward and
    _embedding_bag_per_sample_weights_backward on tpu."""
    torch_tpu.reset_fallback_report()
    F = torch.nn.functional
    g = torch.Generator().manual_seed(8)
    for pad in (None, 3):
        for freq in ([False, True] if mode != "max" else [False]):
            for psw in ([False, True] if mode == "sum" else [False]):
                w = torch.randn(12, 4, generator=g, dtype=dtype)
                ii = torch.randint(0, 12, (15,), generator=g)
                off = torch.tensor([0, 3, 3, 9, 11])
                pw = torch.rand(15, generator=g, dtype=dtype) if psw else None
                gw = torch.randn(5, 4, generator=g, dtype=dtype)
                leaves_c = [w.clone().requires_grad_()] + ([pw.clone().requires_grad_()] if psw else [])
                leaves_t = [_t(w).requires_grad_()] + ([_t(pw).requires_grad_()] if psw else [])
                kw = dict(mode=mode, padding_idx=pad, scale_grad_by_freq=freq)
                y = F.embedding_bag(ii, leaves_c[0], off, per_sample_weights=leaves_c[1] if psw else None, **kw)
                yt = F.embedding_bag(_t(ii), leaves_t[0], _t(off), per_sample_weights=leaves_t[1] if psw else None,
                                     **kw)
                want = torch.autograd.grad((y * gw).sum(), leaves_c)
                got = torch.autograd.grad((yt * _t(gw)).sum(), leaves_t)
                torch.testing.assert_close(yt.detach().cpu(), y.detach())
                for a, b in zip(got, want):
                    torch.testing.assert_close(a.cpu(), b)
    assert_no_fallback("_embedding_bag", "_embedding_bag_backward", "_embedding_bag_per_sample_weights_backward",
                       "_embedding_bag_dense_backward")


def test_out_overload_whose_decomposition_declines(monkeypatch):
    """PyTorch's decomposition of adaptive_max_pool2d returns NotImplemented for
    some inputs; its out= overload (reached by return_indices=True) then runs by
    the next path instead of raising about the number of results. On the host
    driver adaptive_max_pool2d has a kernel (kernels/pool.c) and the table is not
    reached, so the decline is checked on the table's entry point directly too:
    NotImplemented, with the out= arguments handed back untouched."""
    from torch_tpu import _decomp

    monkeypatch.delenv("TORCH_TPU_FALLBACK")
    F = torch.nn.functional
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 4, 4, generator=g)
    out, idx = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    kwargs = {"out": out, "indices": idx}
    assert _decomp.run("aten::adaptive_max_pool2d", "out", (_t(x), [2, 3]), kwargs) is NotImplemented
    assert kwargs["out"] is out and kwargs["indices"] is idx and out.numel() == 0 and idx.numel() == 0
    got, want = F.adaptive_max_pool2d(_t(x), (2, 3), True), F.adaptive_max_pool2d(x, (2, 3), True)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=0, atol=0)
    assert torch.equal(got[1].cpu(), want[1]) and got[0].device.type == "tpu"
    x1 = torch.randn(3, 4, 4, generator=g)
    got, want = F.adaptive_max_pool1d(_t(x1), 3, True), F.adaptive_max_pool1d(x1, 3, True)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=0, atol=0)
    assert torch.equal(got[1].cpu(), want[1])


def test_rrelu_on_device():
    """F.rrelu (aten::rrelu_with_noise) on device ops: in training every element
    <= 0 gets a slope from U(lower, upper) and the gradient is scaled by it;
    positive elements and evaluation are the CPU's exactly."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64, 9, generator=g)
    x[0, :3] = 0.0
    lo, hi = 0.1, 0.3
    assert torch.equal(F.rrelu(_t(x), lo, hi, training=False).cpu(), F.rrelu(x, lo, hi, training=False))
    t = _t(x).requires_grad_()
    out = F.rrelu(t, lo, hi, training=True)
    out.sum().backward()
    o, gr = out.detach().cpu(), t.grad.cpu()
    neg = x < 0
    slope = o[neg] / x[neg]
    assert slope.min() >= lo and slope.max() <= hi and slope.std() > 0.02  # drawn, not the mean
    assert torch.equal(o[x > 0], x[x > 0]) and torch.equal(gr[x > 0], torch.ones_like(gr[x > 0]))
    torch.testing.assert_close(gr[neg], slope)
    assert ((gr[x == 0] >= lo) & (gr[x == 0] <= hi)).all()  # the CPU draws a slope for 0 too
    torch.manual_seed(7)
    a = F.rrelu(_t(x), lo, hi, training=True).cpu()
    torch.manual_seed(7)
    b = _t(x)
    F.rrelu(b, lo, hi, training=True, inplace=True)
    assert torch.equal(a, b.cpu())
    for dtype in (torch.bfloat16, torch.float64):
        y = F.rrelu(_t(x.to(dtype)), lo, hi, training=True)
        assert y.dtype == dtype and y.device.type == "tpu"


# ---- decompositions on device ops (torch_tpu/_decomp.py _LOCAL) ---------------


def _decomposed(op):
    from torch_tpu import _decomp
    return _decomp.decomposition_report().get(op, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool], ids=str)
def test_hash_tensor_bit_exact(dtype):
    """hash_tensor (xor_sum of the 64-bit widened elements) equals the CPU's
    bit for bit: every dim/keepdim form, odd and even reduction lengths, NaN,
    infinities and -0.0, out=; the CPU's errors; counted as decomposed."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(3)
    for shape in [(), (2,), (3, 5), (3, 2, 1, 2), (7, 9, 5)]:
        x = _rand(shape, dtype, g) * (100 if dtype.is_floating_point else 1) if dtype != torch.bool else \
            torch.rand(shape, generator=g) > 0.5
        if dtype.is_floating_point and x.numel() > 3:
            x.view(-1)[1:4] = torch.tensor([NAN, -0.0, INF])
        for kw in [{}, dict(dim=0, keepdim=True), dict(dim=-1), dict(dim=(0, -1), keepdim=True), dict(dim=(1, 2))]:
            dims = kw.get("dim", ())
            dims = [dims] if isinstance(dims, int) else list(dims)
            if any(d >= max(x.dim(), 1) for d in dims) or (dims == [0, -1] and x.dim() < 2):
                continue  # dims the shape does not have
            want = torch.hash_tensor(x, **kw)
            got = torch.hash_tensor(_t(x), **kw)
            assert got.device.type == "tpu" and got.dtype == torch.uint64 and got.shape == want.shape
            assert torch.equal(got.cpu().view(torch.int64), want.view(torch.int64)), (shape, kw)
    x = _rand((4, 3), dtype, g) if dtype != torch.bool else torch.ones(4, 3, dtype=torch.bool)
    out = torch.empty(0, dtype=torch.uint64, device="tpu")
    torch.hash_tensor(_t(x), dim=0, out=out)
    assert torch.equal(out.cpu().view(torch.int64), torch.hash_tensor(x, dim=0).view(torch.int64))
    assert _decomposed("aten.hash_tensor.out") > 0 and not torch_tpu.fallback_report()
    with pytest.raises(RuntimeError, match="hash_tensor.*uint64"):
        torch.hash_tensor(_t(x), out=torch.empty(0, dtype=torch.int64, device="tpu"))
    with pytest.raises(RuntimeError, match="Unknown hash_tensor mode"):
        torch.hash_tensor(_t(x), mode=1)
    with pytest.raises(RuntimeError, match="hash_tensor: Expected reduction dim to be specified"):
        torch.hash_tensor(torch.empty(0, 3, device="tpu"))
    with pytest.raises(IndexError, match="hash_tensor: Expected reduction dim 0 to have non-zero size"):
        torch.hash_tensor(torch.empty(0, 3, device="tpu"), dim=0)


LSTSQ_SHAPES = [((2, 3), (2, 3)), ((3, 3), (3, 3)), ((4, 3), (4, 3)), ((3, 2, 3), (3, 2, 3)), ((3, 4, 3), (3, 4, 3)),
                ((5, 3), (5,)), ((3, 4, 3), (3, 4)), ((3, 4, 3), (1, 4, 2)), ((0, 3), (0, 2)), ((0, 4, 3), (0, 4, 2))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelss", "gelsd"])
def test_linalg_lstsq_equals_cpu(dtype, driver):
    """linalg.lstsq on the device: the CPU's solution, residuals, rank and
    singular values (shapes and dtypes per driver: rank only when the driver
    computes it, residuals only for m > n), vector and broadcast right-hand
    sides, empty inputs, rank-deficient A for the SVD drivers, out=."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(7)
    cases = [(torch.randn(a, generator=g, dtype=dtype), torch.randn(b, generator=g, dtype=dtype))
             for a, b in LSTSQ_SHAPES]
    if driver in ("gelss", "gelsd"):
        a = torch.randn(6, 3, generator=g, dtype=dtype)
        a[:, 2] = a[:, 0] - 2 * a[:, 1]  # rank 2: no residuals, the minimum-norm solution
        cases.append((a, torch.randn(6, 2, generator=g, dtype=dtype)))
    for a, b in cases:
        want = torch.linalg.lstsq(a, b, driver=driver)
        got = torch.linalg.lstsq(_t(a), _t(b), driver=driver)
        for w, r in zip(want, got):
            assert r.device.type == "tpu" and r.shape == w.shape and r.dtype == w.dtype, (a.shape, b.shape)
            torch.testing.assert_close(r.cpu(), w)
    a, b = cases[2]
    outs = [torch.empty(0, dtype=dtype, device="tpu") for _ in range(2)]
    outs = outs + [torch.empty(0, dtype=torch.int64, device="tpu"), torch.empty(0, dtype=dtype, device="tpu")]
    torch.linalg.lstsq(_t(a), _t(b), driver=driver, out=outs)
    for w, r in zip(torch.linalg.lstsq(a, b, driver=driver), outs):
        assert r.shape == w.shape
        torch.testing.assert_close(r.cpu(), w)
    assert _decomposed("aten.linalg_lstsq.out") > 0 and not torch_tpu.fallback_report()
    with pytest.raises(RuntimeError, match="linalg.lstsq: parameter `driver`"):
        torch.linalg.lstsq(_t(a), _t(b), driver="gelsx")
    with pytest.raises(RuntimeError, match="linalg.lstsq: Expected input and other to have the same dtype"):
        torch.linalg.lstsq(_t(a), _t(b).to(torch.float64 if dtype == torch.float32 else torch.float32))
    with pytest.raises(RuntimeError, match=r"linalg.lstsq: input.size\(-2\) should match"):
        torch.linalg.lstsq(_t(a), _t(b)[:-1])


def test_linalg_lstsq_declines_what_the_svd_cannot_decide(monkeypatch):
    """gels of a rank-deficient A (the CPU's QR answer is not the SVD's): the
    decomposition declines, so the CPU fallback answers it."""
    from torch_tpu import _decomp
    monkeypatch.delenv("TORCH_TPU_FALLBACK")
    a = torch.randn(5, 3, dtype=torch.float64)
    a[:, 2] = a[:, 0] + a[:, 1]
    b = torch.randn(5, 2, dtype=torch.float64)
    assert _decomp.run("aten::linalg_lstsq", "", (_t(a), _t(b)), {"driver": "gels"}) is NotImplemented
    torch_tpu.reset_fallback_report()
    torch.testing.assert_close(torch.linalg.lstsq(_t(a), _t(b), driver="gels").solution.cpu(),
                               torch.linalg.lstsq(a, b, driver="gels").solution)
    assert "aten::linalg_lstsq.out" in torch_tpu.fallback_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_linalg_polar_equals_cpu(dtype):
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    g = torch.Generator().manual_seed(11)
    for shape in [(5, 5), (5, 3), (2, 2), (2, 5, 3), (1, 1, 5, 5), (0, 3, 2), (3, 0)]:
        a = torch.randn(shape, generator=g, dtype=dtype)
        for w, r in zip(torch.linalg.polar(a), torch.linalg.polar(_t(a))):
            assert r.device.type == "tpu" and r.shape == w.shape and r.dtype == w.dtype
            torch.testing.assert_close(r.cpu(), w)
    assert _decomposed("aten.linalg_polar.out") > 0
    with pytest.raises(RuntimeError, match="linalg.polar: input must have at least as many rows"):
        torch.linalg.polar(torch.randn(3, 4, dtype=dtype, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_grid_sampler_3d_equals_cpu(dtype):
    """grid_sampler_3d, every interpolation (trilinear, nearest, tricubic), padding
    mode and align_corners, grids reaching past the borders: trilinear and
    nearest bit-exact in every dtype (the CPU's order and rounding), tricubic
    within rounding."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    g = torch.Generator().manual_seed(13)
    for xs, gs in [((1, 1, 2, 2, 2), (1, 1, 1, 1, 3)), ((2, 3, 5, 7, 6), (2, 4, 3, 5, 3))]:
        x = torch.randn(xs, generator=g).to(dtype)
        grid = (torch.rand(gs, generator=g) * 2.4 - 1.2).to(dtype)
        for mode in (0, 1, 2):
            for pad in (0, 1, 2):
                for align in (False, True):
                    want = torch.grid_sampler_3d(x, grid, mode, pad, align)
                    got = torch.grid_sampler_3d(_t(x), _t(grid), mode, pad, align)
                    assert got.device.type == "tpu" and got.dtype == dtype and got.shape == want.shape
                    exact = mode != 2 or dtype == torch.bfloat16
                    torch.testing.assert_close(got.cpu(), want, **({"rtol": 0, "atol": 0} if exact else {}))
    assert _decomposed("aten.grid_sampler_3d.default") == 36
    with pytest.raises(RuntimeError, match="grid_sampler"):
        torch.grid_sampler_3d(_t(x), _t(grid)[..., :2], 0, 0, False)


def _check_grid_sampler_backward(op, modes, go, x, grid):
    """op (grid_sampler_2d/3d_backward) on tpu equals the CPU's for each mode, padding mode,
    align_corners and output mask (the input's gradient asked for or not)."""
    for mode in modes:
        for pad in (0, 1, 2):
            for align in (False, True):
                for mask in ([True, True], [False, True]):
                    want = op(go, x, grid, mode, pad, align, mask)
                    got = op(_t(go), _t(x), _t(grid), mode, pad, align, mask)
                    assert (got[0] is None) == (not mask[0])
                    for w, r in zip(want, got):
                        if w is not None:
                            assert r.device.type == "tpu" and r.shape == w.shape and r.dtype == w.dtype
                            scale = w.abs().max().item()
                            torch.testing.assert_close(r.cpu(), w, rtol=0, atol=1e-6 * scale if x.dtype ==
                                                       torch.float32 else 1e-13 * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grid_sampler_2d_backward_equals_cpu(dtype):
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    g = torch.Generator().manual_seed(17)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=dtype)
    grid = torch.rand(2, 4, 6, 2, generator=g, dtype=dtype) * 2.4 - 1.2
    go = torch.randn(2, 3, 4, 6, generator=g, dtype=dtype)
    _check_grid_sampler_backward(torch.ops.aten.grid_sampler_2d_backward, (0, 1, 2), go, x, grid)
    assert _decomposed("aten.grid_sampler_2d_backward.default") == 36


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grid_sampler_3d_backward_equals_cpu(dtype):
    """grid_sampler_3d_backward (trilinear, nearest; every padding mode and
    align_corners; the input's gradient masked or not): the vjp of the forward's
    decomposition, as the 2-d backward; and through autograd."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    g = torch.Generator().manual_seed(19)
    x = torch.randn(2, 3, 4, 5, 6, generator=g, dtype=dtype)
    grid = torch.rand(2, 3, 4, 2, 3, generator=g, dtype=dtype) * 2.4 - 1.2
    go = torch.randn(2, 3, 3, 4, 2, generator=g, dtype=dtype)
    _check_grid_sampler_backward(torch.ops.aten.grid_sampler_3d_backward, (0, 1), go, x, grid)
    assert _decomposed("aten.grid_sampler_3d_backward.default") == 24
    xd, gd = _t(x).requires_grad_(), _t(grid).requires_grad_()
    xc, gc = x.clone().requires_grad_(), grid.clone().requires_grad_()
    torch.nn.functional.grid_sample(xd, gd, align_corners=False).sum().backward()
    torch.nn.functional.grid_sample(xc, gc, align_corners=False).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    torch.testing.assert_close(gd.grad.cpu(), gc.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_hardshrink_backward_equals_cpu(dtype):
    """hardshrink_backward (functional and grad_input=): 0 where |input| <= lambd
    (lambd rounded to the promoted dtype), broadcasting, type promotion, out=
    resizing and its cast rule, integer inputs refused. A NaN input passes its
    gradient, as the CPU's scalar loop (a row shorter than two vectors)."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    g = torch.Generator().manual_seed(23)
    x = torch.tensor([-1.0, -0.5, -0.4999, 0.0, 0.5, 0.50001, 2.0, -float("inf"), float("inf")]).to(dtype)
    go = torch.randn(9, generator=g).to(dtype)
    nan = torch.tensor([float("nan"), 0.25, 1.0]).to(dtype)
    want = torch.ops.aten.hardshrink_backward(go[:3], nan, 0.5)
    torch.testing.assert_close(torch.ops.aten.hardshrink_backward(_t(go[:3]), _t(nan), 0.5).cpu(), want, rtol=0,
                               atol=0)
    for lambd in (0.5, 0.50001, 0.0, 3.0):
        want = torch.ops.aten.hardshrink_backward(go, x, lambd)
        got = torch.ops.aten.hardshrink_backward(_t(go), _t(x), lambd)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, )
    want = torch.ops.aten.hardshrink_backward(go.to(torch.float64), x.reshape(3, 1, 3)[:, :, :1], 0.5)
    got = torch.ops.aten.hardshrink_backward(_t(go.to(torch.float64)), _t(x.reshape(3, 1, 3)[:, :, :1]), 0.5)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    out = torch.empty(0, dtype=dtype, device="tpu")
    r = torch.ops.aten.hardshrink_backward.grad_input(_t(go), _t(x), 0.5, grad_input=out)
    assert r is out and out.shape == (9,)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.hardshrink_backward(go, x, 0.5), rtol=0, atol=0)
    xd = _t(x).requires_grad_()
    torch.nn.functional.hardshrink(xd, 0.5).backward(_t(go))
    xc = x.clone().requires_grad_()
    torch.nn.functional.hardshrink(xc, 0.5).backward(go)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=0, atol=0)
    assert _decomposed("aten.hardshrink_backward.grad_input") == 8  # the functional op runs as its out= one
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.ops.aten.hardshrink_backward.grad_input(_t(go.float()), _t(x.float()), 0.5,
                                                      grad_input=torch.empty(9, dtype=torch.int64, device="tpu"))
    with pytest.raises(NotImplementedError, match="hardshrink_backward: not implemented for 'Long'"):
        torch.ops.aten.hardshrink_backward(_t(torch.ones(3, dtype=torch.int64)), _t(torch.ones(3, dtype=torch.int64)),
                                           0.5)


def test_efficientzerotensor_on_device():
    """_efficientzerotensor (sgn's backward of real inputs creates one): zeros on
    the device in the asked (or default) dtype; out= zeros in the out= tensor's
    own dtype, resized; no CPU fallback."""
    from torch_tpu import _decomp
    _decomp.reset_decomposition_report()
    for dtype in (None, torch.float64, torch.int32, torch.bool):
        want = torch.ops.aten._efficientzerotensor([2, 3], dtype=dtype)
        got = torch.ops.aten._efficientzerotensor([2, 3], dtype=dtype, device="tpu")
        assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
        assert not got.cpu().any()
    out = torch.ones(5, dtype=torch.int64, device="tpu")
    r = torch.ops.aten._efficientzerotensor.out([2, 2], out=out)
    assert r is out and out.shape == (2, 2) and out.dtype == torch.int64 and not out.cpu().any()
    assert _decomposed("aten._efficientzerotensor.default") == 5  # out=: ATen's composite calls it
    x = torch.tensor([-2.0, 0.0, 3.0], device="tpu", requires_grad=True)
    torch.sgn(x).backward(torch.ones(3, device="tpu"))
    assert x.grad.device.type == "tpu" and not x.grad.cpu().any()
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.ops.aten._efficientzerotensor([-1], device="tpu")

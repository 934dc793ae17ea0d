"""kthvalue, mode and the tie indices of median/nanmedian on native kernels
(runtime/kernels/reduce.c) against PyTorch's CPU, element for element:
values and indices, ties and NaN included (the kernels replay the CPU's
quickselect, std::sort and nth_element orders), every dtype the CPU accepts,
0-dim inputs, size-1 and 0-size dims, strided and transposed views, keepdim,
negative dims, out= and its checks. None may reach the CPU fallback."""
import pytest
import torch

import torch_tpu
from pointwise_util import assert_no_fallback

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
NAN = float("nan")


def _inputs(dtype, shape=(6, 11), seed=0):
    """Few distinct values (ties everywhere); floats with NaN, +-inf and -0.0."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -3
        return torch.randint(lo, 4, shape, generator=g, dtype=dtype)
    x = torch.randint(-3, 4, shape, generator=g).double()
    x[x == 0] = -0.0  # half the zeros negative
    x.view(-1)[::5] = 0.0
    x[1, 3] = NAN
    x[2, :] = NAN  # an all-NaN row
    x[4, ::2] = NAN
    x[0, 0], x[0, 1] = float("inf"), float("-inf")
    return x.to(dtype)


def _views(x):
    return [x, x.t(), x[:, ::3], x[1:2], x[0], x[0, 0]]


def _same(got, want):
    assert got.values.dtype == want.values.dtype and got.indices.dtype == torch.int64
    torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got.indices.cpu(), want.indices), (got.indices.cpu(), want.indices)


def _dims(x):
    return range(-max(x.dim(), 1), max(x.dim(), 1))


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_kthvalue(dtype):
    torch_tpu.reset_fallback_report()
    for x in _views(_inputs(dtype)):
        for dim in _dims(x):
            n = x.shape[dim] if x.dim() else 1
            for k in range(1, n + 1):
                for keepdim in (False, True):
                    _same(torch.kthvalue(x.to("tpu"), k, dim, keepdim), torch.kthvalue(x, k, dim, keepdim))
    big = _inputs(dtype, (300, 257), seed=1)  # long rows (the quickselect's partitions) and many rows
    for dim, k in ((0, 1), (0, 150), (1, 129), (1, 257), (-1, 40)):
        _same(big.to("tpu").kthvalue(k, dim), big.kthvalue(k, dim))
    # out=, resized from empty; the default dim
    x = _inputs(dtype)
    v = torch.empty(0, dtype=dtype, device="tpu")
    i = torch.empty(0, dtype=torch.long, device="tpu")
    r = torch.kthvalue(x.to("tpu"), 3, out=(v, i))
    assert r.values is v and r.indices is i
    _same(r, torch.kthvalue(x, 3))
    assert_no_fallback("kthvalue")


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_mode(dtype):
    torch_tpu.reset_fallback_report()
    for x in _views(_inputs(dtype)):
        for dim in _dims(x):
            for keepdim in (False, True):
                _same(torch.mode(x.to("tpu"), dim, keepdim), torch.mode(x, dim, keepdim))
    big = _inputs(dtype, (300, 257), seed=1)  # rows past 16 take the introsort path
    for dim in (0, 1):
        _same(big.to("tpu").mode(dim), big.mode(dim))
    x = _inputs(dtype)
    _same(x.to("tpu").mode(), x.mode())
    v = torch.empty(0, dtype=dtype, device="tpu")
    i = torch.empty(0, dtype=torch.long, device="tpu")
    r = torch.mode(x.to("tpu"), 0, True, out=(v, i))
    assert r.values is v and r.indices is i
    _same(r, torch.mode(x, 0, True))
    assert_no_fallback("mode")


def test_tie_orders_match_the_cpu():
    """The indices the CPU's algorithms leave for equal values."""
    torch_tpu.reset_fallback_report()
    for n in (1, 2, 3, 10, 16, 17, 40, 100, 1000):
        ones = torch.ones(n)
        t = ones.to("tpu")
        for k in sorted({1, min(2, n), (n + 1) // 2, n}):
            _same(t.kthvalue(k), ones.kthvalue(k))
        _same(t.mode(0), ones.mode(0))
        _same(t.median(0), ones.median(0))
        _same(t.nanmedian(0), ones.nanmedian(0))
    g = torch.Generator().manual_seed(3)
    for trial in range(40):  # sorted, reversed and random rows of few values, NaN among them
        n = int(torch.randint(1, 200, (1,), generator=g))
        x = torch.randint(0, 4, (n,), generator=g).double()
        if trial % 3 == 0:
            x = x.sort().values
        elif trial % 3 == 1:
            x = x.sort(descending=True).values
        if trial % 2:
            x[torch.randint(0, n, (max(n // 7, 1),), generator=g)] = NAN
        t = x.to("tpu")
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        _same(t.kthvalue(k), x.kthvalue(k))
        _same(t.mode(), x.mode())
        _same(t.median(0), x.median(0))
        _same(t.nanmedian(0), x.nanmedian(0))
    assert_no_fallback("kthvalue", "mode", "median", "nanmedian")


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_median_indices_are_the_cpus(dtype):
    torch_tpu.reset_fallback_report()
    for x in _views(_inputs(dtype, (9, 13))):
        for dim in _dims(x):
            for keepdim in (False, True):
                _same(torch.median(x.to("tpu"), dim, keepdim), torch.median(x, dim, keepdim))
                _same(torch.nanmedian(x.to("tpu"), dim, keepdim), torch.nanmedian(x, dim, keepdim))
    assert_no_fallback("median", "nanmedian")


def test_empty_and_zero_dim():
    torch_tpu.reset_fallback_report()
    s = torch.tensor(5.0)
    _same(s.to("tpu").kthvalue(1), s.kthvalue(1))
    _same(s.to("tpu").kthvalue(1, 0, True), s.kthvalue(1, 0, True))
    _same(s.to("tpu").mode(), s.mode())
    _same(s.to("tpu").mode(-1, True), s.mode(-1, True))
    e = torch.empty(3, 0)
    _same(e.to("tpu").kthvalue(1, 0), e.kthvalue(1, 0))  # reduces a non-empty dim: empty result
    _same(e.to("tpu").mode(0, True), e.mode(0, True))
    _same(torch.empty(0, 3).to("tpu").mode(1), torch.empty(0, 3).mode(1))
    assert_no_fallback("kthvalue", "mode")


def _sync(r):
    """Data-dependent errors of queued kernels surface when the result is read."""
    for t in r if isinstance(r, tuple) else (r,):
        if isinstance(t, torch.Tensor):
            t.cpu()


def _raises_as_cpu(fn, x, exc, match):
    with pytest.raises(exc, match=match):
        _sync(fn(x))
    with pytest.raises(exc, match=match):
        _sync(fn(x.to("tpu")))


def test_errors_as_on_the_cpu():
    # kthvalue of an empty dim: the CPU's IndexError; on tpu PyTorch's meta function
    # (torch._meta_registrations.kthvalue_meta), which runs first, checks k first.
    for x, dim in ((torch.empty(3, 0), 1), (torch.empty(0), 0)):
        with pytest.raises(IndexError, match=rf"kthvalue\(\): Expected reduction dim {dim}"):
            x.kthvalue(1, dim)
        with pytest.raises(RuntimeError, match=rf"kthvalue\(\): selected number k out of range for dimension {dim}"):
            x.to("tpu").kthvalue(1, dim)
    _raises_as_cpu(lambda x: x.mode(1), torch.empty(3, 0), IndexError, r"mode\(\): Expected reduction dim 1")
    _raises_as_cpu(lambda x: x.mode(), torch.empty(0), IndexError, r"mode\(\): Expected reduction dim 0")
    for k in (0, 4, -1):
        _raises_as_cpu(lambda x: x.kthvalue(k), torch.ones(3), RuntimeError, "out of range")
    _raises_as_cpu(lambda x: torch.tensor(5.0, device=x.device).kthvalue(2), torch.ones(1), RuntimeError,
                   "out of range")
    _raises_as_cpu(lambda x: x.kthvalue(1, 2), torch.ones(3, 4), IndexError, "out of range")
    _raises_as_cpu(lambda x: x.mode(-3), torch.ones(3, 4), IndexError, "out of range")
    _raises_as_cpu(lambda x: x.kthvalue(1), torch.ones(3, dtype=torch.bool), NotImplementedError, "(?i)bool")

    def wrong_dtype(op, values_dtype, index_dtype):
        def f(x):
            out = (torch.empty(0, dtype=values_dtype, device=x.device),
                   torch.empty(0, dtype=index_dtype, device=x.device))
            return torch.kthvalue(x, 1, out=out) if op == "kthvalue" else torch.mode(x, out=out)
        return f
    for op in ("kthvalue", "mode"):
        _raises_as_cpu(wrong_dtype(op, torch.float64, torch.long), torch.ones(3), RuntimeError, "")
        _raises_as_cpu(wrong_dtype(op, torch.float32, torch.int32), torch.ones(3), RuntimeError, "")


def test_gradients():
    torch_tpu.reset_fallback_report()
    x = torch.randn(5, 7, dtype=torch.float64)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    for t in (xc, xt):
        (t.kthvalue(3, 1).values.sum() + t.mode(0).values.sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    assert_no_fallback("kthvalue", "mode")


# ---- searchsorted / bucketize ----------------------------------------------------------

def _sorted_rows(dtype, shape, seed=0):
    """Sorted rows with repeats; floats end in inf and NaN (NaN sorts last)."""
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -6
        return torch.randint(lo, 7, shape, generator=g).sort(-1).values.to(dtype)
    x = torch.randint(-6, 7, shape, generator=g).double() / 2
    x[..., -2] = float("inf")
    x[..., -1] = NAN
    return x.sort(-1).values.to(dtype)


def _values(dtype, shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -8
        return torch.randint(lo, 9, shape, generator=g).to(dtype)
    x = torch.randint(-16, 17, shape, generator=g).double() / 4
    x.view(-1)[::7] = NAN
    x.view(-1)[3::11] = float("-inf")
    return x.to(dtype)


def _same_t(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want), (got.cpu(), want)


SIDES = [dict(), dict(right=True), dict(side="left"), dict(side="right"), dict(side="right", right=True)]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_searchsorted(dtype):
    torch_tpu.reset_fallback_report()
    b1 = _sorted_rows(dtype, (12,))
    bn = _sorted_rows(dtype, (3, 4, 9))
    v = _values(dtype, (3, 4, 5))
    cases = [(b1, v), (b1, v.transpose(0, 2)), (b1, v[0, 0]), (b1, v[:, :, :0]), (bn, v), (bn, v[:, :, ::2]),
             (bn.transpose(0, 1).contiguous().transpose(0, 1), v), (b1[:1], v), (b1[::2], v[1])]
    for b, x in cases:
        for kw in SIDES:
            for out_int32 in (False, True):
                want = torch.searchsorted(b, x, out_int32=out_int32, **kw)
                _same_t(torch.searchsorted(b.to("tpu"), x.to("tpu"), out_int32=out_int32, **kw), want)
                out = torch.empty(0, dtype=want.dtype, device="tpu")
                r = torch.searchsorted(b.to("tpu"), x.to("tpu"), out_int32=out_int32, out=out, **kw)
                assert r is out
                _same_t(out, want)
    # sorter: the boundaries in a scrambled order
    for b, x in ((b1, v), (bn, v)):
        perm = torch.argsort(torch.rand(b.shape, generator=torch.Generator().manual_seed(2)), -1)
        scrambled = b.gather(-1, perm)
        sorter = torch.sort(scrambled, dim=-1, stable=True).indices
        for kw in SIDES:
            want = torch.searchsorted(scrambled, x, sorter=sorter, **kw)
            _same_t(torch.searchsorted(scrambled.to("tpu"), x.to("tpu"), sorter=sorter.to("tpu"), **kw), want)
    # Scalars
    for s in (0, 1, -1, 2.5, 3, True, float("nan"), float("inf")):
        if dtype == torch.uint8 and isinstance(s, int) and s < 0:
            continue
        for kw in SIDES:
            _same_t(torch.searchsorted(b1.to("tpu"), s, **kw), torch.searchsorted(b1, s, **kw))
    assert_no_fallback("searchsorted")


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_bucketize(dtype):
    torch_tpu.reset_fallback_report()
    b = _sorted_rows(dtype, (10,))
    v = _values(dtype, (4, 6))
    for x in (v, v.t(), v[0, 0], v[:0]):
        for right in (False, True):
            for out_int32 in (False, True):
                want = torch.bucketize(x, b, right=right, out_int32=out_int32)
                _same_t(torch.bucketize(x.to("tpu"), b.to("tpu"), right=right, out_int32=out_int32), want)
                out = torch.empty(0, dtype=want.dtype, device="tpu")
                torch.bucketize(x.to("tpu"), b.to("tpu"), right=right, out_int32=out_int32, out=out)
                _same_t(out, want)
    for s in (0, 2, 1.25, float("nan")):
        _same_t(torch.bucketize(s, b.to("tpu")), torch.bucketize(s, b))
    assert_no_fallback("bucketize")


def test_searchsorted_mixed_dtypes():
    """Both sides are compared in torch.result_type(boundaries, values), as on the CPU."""
    torch_tpu.reset_fallback_report()
    f32 = torch.tensor([0.1, 0.2, 0.3])
    big = torch.tensor([16777216, 16777217, 16777218])
    cases = [
        (f32, torch.tensor([0.1], dtype=torch.float64)),   # compared in float64
        (f32, torch.tensor(0.1, dtype=torch.float64)),     # a 0-dim value: float32
        (big, torch.tensor([16777217.0])),                 # int64 boundaries rounded to float32
        (big, torch.tensor(16777217)),
        (torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([-1, 2], dtype=torch.int8)),  # int16
        (torch.tensor([1, 2, 300]), torch.tensor(300, dtype=torch.int64).to(torch.int16)),
        (torch.tensor([1, 2, 3], dtype=torch.int8), torch.tensor(258)),  # a 0-dim int64 wraps into int8
        (f32.half(), torch.tensor([0.1, 0.2]).bfloat16()),  # float32
        (f32, torch.tensor([True, False])),
        (torch.tensor([1, 2, 3]), torch.tensor([2.5, 1.0])),
    ]
    for b, x in cases:
        for kw in (dict(), dict(right=True)):
            _same_t(torch.searchsorted(b.to("tpu"), x.to("tpu"), **kw), torch.searchsorted(b, x, **kw))
    for b, s in ((f32, 0.1), (big, 16777217), (big, 16777217.0), (torch.tensor([1, 2, 3]), 2.5),
                 (f32.half(), 0.1), (f32.bfloat16(), 0.2), (torch.tensor([0, 1], dtype=torch.uint8), True)):
        for kw in (dict(), dict(right=True)):
            _same_t(torch.searchsorted(b.to("tpu"), s, **kw), torch.searchsorted(b, s, **kw))
            _same_t(torch.bucketize(s, b.to("tpu"), **kw), torch.bucketize(s, b, **kw))
    assert_no_fallback("searchsorted", "bucketize")


def test_searchsorted_errors_as_on_the_cpu():
    b = torch.tensor([1.0, 2.0, 3.0])
    x = torch.tensor([2.0])
    ss = torch.searchsorted

    def both(fn, exc, match):
        for d in ("cpu", "tpu"):
            with pytest.raises(exc, match=match):
                _sync(fn(d))
    both(lambda d: ss(b.to(d), x.to(d), side="left", right=True), RuntimeError, "opposites")
    both(lambda d: ss(b.to(d), x.to(d), side="middle"), RuntimeError, "side can only be")
    both(lambda d: ss(b.to(d), x.to(d), sorter=torch.tensor([0, 1, 5], device=d)), RuntimeError,
         "sorter index out of range")
    both(lambda d: ss(b.to(d), x.to(d), sorter=torch.tensor([0, 1, -1], device=d)), RuntimeError,
         "sorter index out of range")
    both(lambda d: ss(b.to(d), x.to(d), sorter=torch.tensor([0, 1, 2], dtype=torch.int32, device=d)), RuntimeError,
         "long dtype")
    both(lambda d: ss(b.to(d), x.to(d), sorter=torch.tensor([0, 1], device=d)), RuntimeError, "same size")
    both(lambda d: ss(torch.ones(2, 3, device=d), torch.ones(3, 2, device=d)), RuntimeError, "first N-1 dimensions")
    both(lambda d: ss(torch.tensor(1.0, device=d), torch.ones(3, device=d)), RuntimeError, "dimension")
    both(lambda d: ss(b.to(d), x.to(d), out=torch.empty(1, dtype=torch.int32, device=d)), RuntimeError,
         "dtype is wrong")
    both(lambda d: ss(b.to(d), x.to(d), out_int32=True, out=torch.empty(1, dtype=torch.int64, device=d)),
         RuntimeError, "dtype is wrong")
    both(lambda d: ss(b.to(d), x.to(d), out=torch.empty(1, device=d)), RuntimeError, "")
    both(lambda d: torch.bucketize(x.to(d), torch.ones(2, 3, device=d)), RuntimeError, "1 dimension")
    both(lambda d: torch.bucketize(x.to(d), torch.tensor(1.0, device=d)), RuntimeError, "1 dimension")
    both(lambda d: ss(torch.tensor([False, True], device=d), torch.tensor([True], device=d)), NotImplementedError,
         "(?i)bool")


# ---- put_ / index_reduce -------------------------------------------------------------------

def _data(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -5
        return torch.randint(lo, 6, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    x.view(-1)[::9] = NAN
    x.view(-1)[4::13] = -0.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_put(dtype):
    torch_tpu.reset_fallback_report()
    base = _data(dtype, (4, 6))
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(-24, 24, (3, 10), generator=g)  # repeats and negative indices
    src = _data(dtype, (30,), seed=1)
    for self_ in (base, base.t(), base[:, ::2]):
        n = self_.numel()
        i = idx % (2 * n) - n  # in [-n, n): negative indices too
        for accumulate in (False, True):
            want = self_.clone().put_(i, src, accumulate=accumulate)
            t = self_.to("tpu")
            r = t.put_(i.to("tpu"), src.to("tpu"), accumulate=accumulate)
            assert r is t
            torch.testing.assert_close(t.cpu(), want, equal_nan=True, rtol=0, atol=0)
            got = torch.put(self_.to("tpu"), i.t().to("tpu"), src.reshape(10, 3).to("tpu"), accumulate)
            torch.testing.assert_close(got.cpu(), torch.put(self_, i.t(), src.reshape(10, 3), accumulate),
                                       equal_nan=True, rtol=0, atol=0)
    s = _data(dtype, ())  # 0-dim self
    for accumulate in (False, True):
        want = s.clone().put_(torch.tensor([0, -1]), _data(dtype, (2,)), accumulate=accumulate)
        got = s.to("tpu").put_(torch.tensor([0, -1], device="tpu"), _data(dtype, (2,)).to("tpu"),
                               accumulate=accumulate)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    e = torch.empty(0, dtype=dtype)
    torch.testing.assert_close(e.to("tpu").put_(torch.empty(0, dtype=torch.long, device="tpu"),
                                                e.to("tpu")).cpu(), e)
    assert_no_fallback("put")


def test_put_errors_as_on_the_cpu():
    def both(fn, exc, match):
        for d in ("cpu", "tpu"):
            with pytest.raises(exc, match=match):
                _sync(fn(d))
    z = lambda d: torch.zeros(2, 3, device=d)  # noqa: E731
    one = lambda d: torch.tensor([1.0], device=d)  # noqa: E731
    both(lambda d: z(d).put_(torch.tensor([6], device=d), one(d)), IndexError, "out of range")
    both(lambda d: z(d).put_(torch.tensor([-7], device=d), one(d)), IndexError, "out of range")
    both(lambda d: z(d).put_(torch.tensor([1], dtype=torch.int32, device=d), one(d)), RuntimeError, "long tensor")
    both(lambda d: z(d).put_(torch.tensor([1], device=d), one(d).double()), RuntimeError, "same dtype")
    both(lambda d: z(d).put_(torch.tensor([1, 2], device=d), one(d)), IndexError, "same number of elements")
    both(lambda d: torch.zeros(0, device=d).put_(torch.tensor([0], device=d), one(d)), IndexError, "empty tensor")
    both(lambda d: torch.zeros(1, device=d).expand(3).put_(torch.tensor([0], device=d), one(d)), RuntimeError,
         "single memory location")
    # nothing is written when an index is out of range
    t = torch.zeros(3, device="tpu")
    with pytest.raises(IndexError):
        t.put_(torch.tensor([0, 5], device="tpu"), torch.tensor([1.0, 2.0], device="tpu")).cpu()
    assert t.cpu().eq(0).all()


REDUCES = ["prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_index_reduce(dtype, reduce):
    if dtype == torch.bool and reduce == "mean":
        pytest.skip("the CPU has no bool mean (tested in test_index_reduce_errors_as_on_the_cpu)")
    torch_tpu.reset_fallback_report()
    self_ = _data(dtype, (5, 4, 3))
    g = torch.Generator().manual_seed(7)
    for dim in (0, 1, 2, -1):
        n = self_.shape[dim]
        for idx in (torch.randint(0, n, (7,), generator=g), torch.randint(0, n, (7,), generator=g).int(),
                    torch.tensor([n - 1]), torch.empty(0, dtype=torch.long)):
            shape = list(self_.shape)
            shape[dim] = idx.numel()
            src = _data(dtype, shape, seed=2)
            for include_self in (True, False):
                args = (dim, idx.to("tpu"), src.to("tpu"), reduce)
                if dtype == torch.bool and not include_self:  # the CPU has no bool identity fill
                    with pytest.raises(NotImplementedError):
                        self_.index_reduce(dim, idx, src, reduce, include_self=False)
                    with pytest.raises(NotImplementedError):
                        self_.to("tpu").index_reduce(*args, include_self=False).cpu()
                    continue
                want = self_.index_reduce(dim, idx, src, reduce, include_self=include_self)
                got = self_.to("tpu").index_reduce(*args, include_self=include_self)
                torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
                t = self_.transpose(0, 2).contiguous().transpose(0, 2).to("tpu")  # strided self
                r = t.index_reduce_(*args, include_self=include_self)
                assert r is t
                torch.testing.assert_close(t.cpu(), want, equal_nan=True, rtol=0, atol=0)
                if idx.numel() == 0:  # PyTorch's meta function selects slice 0 of source on meta tensors
                    continue
                out = torch.empty(0, dtype=dtype, device="tpu")
                torch.index_reduce(self_.to("tpu"), *args, include_self=include_self, out=out)
                torch.testing.assert_close(out.cpu(), want, equal_nan=True, rtol=0, atol=0)
    if dtype == torch.bool:  # the CPU takes bool only for self of 2 or more dims
        for d in ("cpu", "tpu"):
            with pytest.raises(NotImplementedError):
                _data(dtype, (6,)).to(d).index_reduce(0, torch.tensor([0], device=d), _data(dtype, (1,)).to(d),
                                                      reduce).cpu()
        assert_no_fallback("index_reduce")
        return
    # 1-d and 0-dim self
    v = _data(dtype, (6,))
    idx = torch.tensor([0, 5, 0, 2, 0])
    for include_self in (True, False):
        want = v.index_reduce(0, idx, _data(dtype, (5,), seed=3), reduce, include_self=include_self)
        got = v.to("tpu").index_reduce(0, idx.to("tpu"), _data(dtype, (5,), seed=3).to("tpu"), reduce,
                                       include_self=include_self)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
        s, src0 = _data(dtype, ()), _data(dtype, (), seed=4)
        want = s.index_reduce(0, torch.tensor([0]), src0, reduce, include_self=include_self)
        got = s.to("tpu").index_reduce(0, torch.tensor([0], device="tpu"), src0.to("tpu"), reduce,
                                       include_self=include_self)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    assert_no_fallback("index_reduce")


def test_index_reduce_rounds_every_step_in_half():
    """The CPU's index_reduce computes in the dtype (no float accumulator)."""
    torch_tpu.reset_fallback_report()
    for dtype in (torch.float16, torch.bfloat16):
        for shape in ((1,), (1, 2)):
            h = torch.full(shape, 1000.0, dtype=dtype)
            src = torch.full((8,) + shape[1:], 0.3, dtype=dtype)
            idx = torch.zeros(8, dtype=torch.long)
            for reduce in ("prod", "mean"):
                want = h.index_reduce(0, idx, src, reduce)
                got = h.to("tpu").index_reduce(0, idx.to("tpu"), src.to("tpu"), reduce)
                torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    assert_no_fallback("index_reduce")


def test_index_reduce_errors_as_on_the_cpu():
    def both(fn, exc, match):
        for d in ("cpu", "tpu"):
            with pytest.raises(exc, match=match):
                _sync(fn(d))
    x = lambda d: torch.ones(3, 2, device=d)  # noqa: E731
    s = lambda d: torch.ones(4, 2, device=d)  # noqa: E731
    i4 = lambda d: torch.tensor([0, 2, 0, 0], device=d)  # noqa: E731
    both(lambda d: x(d).index_reduce(0, torch.tensor([0, 3, 0, 0], device=d), s(d), "mean"), IndexError, "")
    both(lambda d: x(d).index_reduce(0, torch.tensor([0, -1, 0, 0], device=d), s(d), "mean"), IndexError, "")
    both(lambda d: x(d).index_reduce(0, i4(d), s(d), "sum"), RuntimeError, "prod, mean, amax or amin")
    both(lambda d: x(d).index_reduce(0, i4(d).float(), s(d), "prod"), RuntimeError, "")
    both(lambda d: x(d).index_reduce(0, i4(d)[:3], s(d), "amax"), RuntimeError, "Number of indices")
    both(lambda d: x(d).index_reduce(0, i4(d), s(d).double(), "prod"), RuntimeError, "same scalar type")
    both(lambda d: x(d).index_reduce(0, i4(d)[None], s(d), "prod"), IndexError, "vector")
    both(lambda d: x(d).bool().index_reduce(0, i4(d), s(d).bool(), "mean"), NotImplementedError, "")

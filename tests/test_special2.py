"""Pointwise ops that ran on the CPU fallback and have native kernels now:
log10, hypot, nextafter, gcd, lcm (runtime/kernels/elementwise.c); frexp,
igamma, igammac, special_ndtri, special_zeta, the modified Bessel functions
i0, i1, k0, k1 and the scaled k0, k1, the spherical Bessel j0, the Bessel
functions j0, j1, y0, y1 and Airy's Ai, and the
orthogonal polynomials (Chebyshev T/U/V/W and the shifted ones, Hermite H/He,
Laguerre L, Legendre P; runtime/kernels/special.c). Each is compared with PyTorch's CPU result,
functional, out= and in-place where ATen has them, on every dtype the CPU
accepts (and raises where the CPU raises), with signed zeros, infinities,
NaN, large values and negative, non-integer, huge and NaN degrees among the
inputs, strided and broadcast operands; none may reach the CPU fallback."""
import pytest
import torch

import torch_tpu
from pointwise_util import assert_no_fallback, check_binary, check_out_and_inplace, inputs

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
INF, NAN = float("inf"), float("nan")
S = torch.special


def _cross(first, second, dtype, rand, seed=0):
    """Every pair of the special values, then 300 pairs from rand(generator)."""
    g = torch.Generator().manual_seed(seed)
    f, s = torch.tensor(first, dtype=torch.float64), torch.tensor(second, dtype=torch.float64)
    ra, rb = rand(g)
    a = torch.cat([f.repeat_interleave(len(second)), ra])
    b = torch.cat([s.repeat(len(first)), rb])
    return a.to(dtype), b.to(dtype)


def _rejects(fn, *args):
    """fn raises on the CPU and on tpu (an unsupported dtype)."""
    with pytest.raises(RuntimeError):
        fn(*args)
    with pytest.raises(RuntimeError):
        fn(*[a.to("tpu") for a in args]).cpu()


# ---- log10 ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_log10(dtype):
    torch_tpu.reset_fallback_report()
    x = inputs(dtype, [0.0, -0.0, 1.0, -1.0, 10.0, 100.0, 0.5, 1e-30, 1e30, INF, -INF, NAN], 0, 1000)
    want = torch.log10(x)
    xt = x.to("tpu")
    got = torch.log10(xt)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(torch.log10(xt[::3]).cpu(), want[::3], equal_nan=True)
    check_out_and_inplace(torch.log10, "log10_", x, want)
    assert_no_fallback("log10")


# ---- float binaries: hypot, nextafter, igamma, igammac, zeta ---------------------

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, -1e30, INF, -INF, NAN]
_GAMMA_A = [0.0, -0.0, 1e-3, 0.5, 1.0, 2.5, 10.0, 30.0, 150.0, -1.0, INF, NAN]
_GAMMA_X = [0.0, -0.0, 1e-3, 0.5, 1.0, 2.5, 10.0, 30.0, 200.0, -1.0, INF, NAN]
_ZETA_X = [1.0, 1.5, 2.0, 3.0, 10.0, 0.5, 0.0, -1.0, -2.0, 60.0, INF, NAN]
_ZETA_Q = [1.0, 0.5, 2.0, 10.0, 1e-3, 0.0, -0.0, -1.0, -2.0, -1.5, 1e10, INF, -INF, NAN]


def _randn(g):
    return torch.randn(300, generator=g, dtype=torch.float64) * 3, torch.randn(300, generator=g, dtype=torch.float64) * 3


def _rand_gamma(g):
    return torch.rand(300, generator=g, dtype=torch.float64) * 20, torch.rand(300, generator=g, dtype=torch.float64) * 30


def _rand_zeta(g):
    return 1 + torch.rand(300, generator=g, dtype=torch.float64) * 9, torch.rand(300, generator=g, dtype=torch.float64) * 12 - 2


# (name, fn, in-place, special values of a, of b, random pairs, dtypes the CPU accepts)
FLOAT_BINARY = [
    ("hypot", torch.hypot, "hypot_", _SPECIAL, _SPECIAL, _randn, FLOATS),
    ("nextafter", torch.nextafter, "nextafter_", _SPECIAL + [1e-40, 6e-8], _SPECIAL, _randn, FLOATS),
    ("igamma", torch.igamma, "igamma_", _GAMMA_A, _GAMMA_X, _rand_gamma, FLOATS),
    ("igammac", torch.igammac, "igammac_", _GAMMA_A, _GAMMA_X, _rand_gamma, FLOATS),
    ("special_zeta", S.zeta, None, _ZETA_X, _ZETA_Q, _rand_zeta, FLOATS[::3] + INTS),
]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name,fn,inplace,sa,sb,rand,dtypes", FLOAT_BINARY, ids=[o[0] for o in FLOAT_BINARY])
def test_float_binary(name, fn, inplace, sa, sb, rand, dtypes, dtype):
    torch_tpu.reset_fallback_report()
    if not dtype.is_floating_point:
        a, b = inputs(dtype, [], 0, 1), inputs(dtype, [], 0, 1).flip(0)
    else:
        a, b = _cross(sa, sb, dtype, rand)
    if dtype not in dtypes:
        _rejects(fn, a, b)
        return
    check_binary(fn, inplace, a, b)
    assert_no_fallback(name)


_UNARY_FLOAT = [torch.log10, S.ndtri, S.modified_bessel_i0, S.modified_bessel_k1, S.scaled_modified_bessel_k0,
                S.spherical_bessel_j0]


@pytest.mark.parametrize("fn", _UNARY_FLOAT + [torch.hypot, torch.nextafter, torch.igamma, torch.igammac, S.zeta,
                                               S.chebyshev_polynomial_t, S.hermite_polynomial_h],
                         ids=lambda f: f.__name__)
def test_integer_out_is_rejected(fn):
    """A float result is not written into an integer out= (the CPU raises)."""
    x = torch.rand(8) + 0.5
    args = (x,) if fn in _UNARY_FLOAT else (x, x.flip(0))
    with pytest.raises(RuntimeError):
        fn(*args, out=torch.empty(8, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        fn(*[a.to("tpu") for a in args], out=torch.empty(8, dtype=torch.int64, device="tpu")).cpu()


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=["igamma", "igammac"])
def test_igamma_large_a(fn):
    """Large shapes a near the transition x ~ a (where log(x^a e^-x / Gamma(a)) cancels)."""
    torch_tpu.reset_fallback_report()
    a = torch.tensor([50.0, 99.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8], dtype=torch.float64).repeat_interleave(5)
    x = a * torch.tensor([0.9, 0.999, 1.0, 1.001, 1.1], dtype=torch.float64).repeat(9)
    for dtype in (torch.float64, torch.float32):
        torch.testing.assert_close(fn(a.to("tpu", dtype), x.to("tpu", dtype)).cpu(), fn(a.to(dtype), x.to(dtype)))
    assert_no_fallback(fn.__name__)


def test_nextafter_reduced_steps():
    """float16/bfloat16 step to their own neighbours (from 0: the smallest subnormal)."""
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.tensor([0.0, 0.0, -0.0, 1.0, 1.0, -1.0, 65504.0, INF, -INF, 3.0, NAN], dtype=dtype)
        b = torch.tensor([1.0, -1.0, -1.0, 2.0, 0.0, -INF, INF, 0.0, 0.0, 3.0, 1.0], dtype=dtype)
        want = torch.nextafter(a, b)
        got = torch.nextafter(a.to("tpu"), b.to("tpu")).cpu()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)) or torch.equal(
            got[:-1].view(torch.int16), want[:-1].view(torch.int16)) and got[-1].isnan(), (dtype, got, want)


def test_zeta_scalar_overloads():
    torch_tpu.reset_fallback_report()
    x, q = _cross(_ZETA_X, _ZETA_Q, torch.float32, _rand_zeta)
    torch.testing.assert_close(S.zeta(2.0, q.to("tpu")).cpu(), S.zeta(2.0, q), equal_nan=True)
    torch.testing.assert_close(S.zeta(x.to("tpu"), 1.5).cpu(), S.zeta(x, 1.5), equal_nan=True)
    out = torch.empty(q.shape, device="tpu")
    S.zeta(3.0, q.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), S.zeta(3.0, q), equal_nan=True)
    assert_no_fallback("special_zeta")


# ---- gcd, lcm --------------------------------------------------------------------

_IMIN = {torch.int64: -2**63, torch.int32: -2**31, torch.int16: -2**15, torch.int8: -128, torch.uint8: 0}


def _int_pair(dtype, lcm=False):
    """Pairs of the special values and random ones. For lcm of int32/int64 not
    INT_MIN: its gcd with an odd number can be -1 (127, INT_MAX), and the CPU's
    INT_MIN / -1 then traps (SIGFPE) in its lcm kernel."""
    info = torch.iinfo(dtype)
    wide = lcm and dtype in (torch.int64, torch.int32)
    s = [0, 1, 2, 3, 4, 6, 12, 100, 127, info.max] + ([] if wide else [info.min])
    if dtype != torch.uint8:
        s += [-1, -4, -6, -100, info.min + 1]
    g = torch.Generator().manual_seed(1)
    lo, hi = max(info.min, -10**6), min(info.max, 10**6)
    r = torch.randint(lo, hi, (2, 300), generator=g, dtype=torch.int64)
    t = torch.tensor(s, dtype=torch.int64)
    a = torch.cat([t.repeat_interleave(len(s)), r[0]])
    b = torch.cat([t.repeat(len(s)), r[1]])
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name,fn,inplace", [("gcd", torch.gcd, "gcd_"), ("lcm", torch.lcm, "lcm_")],
                         ids=["gcd", "lcm"])
def test_gcd_lcm(name, fn, inplace, dtype):
    torch_tpu.reset_fallback_report()
    if dtype.is_floating_point or dtype == torch.bool:
        a = torch.tensor([4, 6, 9]).to(dtype)
        _rejects(fn, a, a.flip(0))
        return
    a, b = _int_pair(dtype, lcm=name == "lcm")
    check_binary(fn, inplace, a, b, float_only=False)
    assert_no_fallback(name)


def test_gcd_mixed_dtypes():
    a = torch.tensor([-128, 100, 6, -6], dtype=torch.int8)
    b = torch.tensor([300, 70000, -4, 2**40])
    for x, y in ((a, b), (b, a), (a, b.to(torch.int32)), (a.to(torch.uint8), b.to(torch.int16))):
        for fn in (torch.gcd, torch.lcm):
            want = fn(x, y)
            got = fn(x.to("tpu"), y.to("tpu"))
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want)


# ---- frexp -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_frexp(dtype):
    torch_tpu.reset_fallback_report()
    x = inputs(dtype, [0.0, -0.0, 1.0, -1.0, 0.5, -3.0, 1e-40, 6e-8, 65504.0, 1e30, -1e300, INF, -INF, NAN],
               -1000, 1000)
    if not dtype.is_floating_point:
        _rejects(torch.frexp, x)
        return
    want = torch.frexp(x)
    got = torch.frexp(x.to("tpu"))
    assert got.mantissa.dtype == dtype and got.exponent.dtype == torch.int32
    torch.testing.assert_close(got.mantissa.cpu(), want.mantissa, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(got.exponent.cpu(), want.exponent)
    strided = torch.frexp(x.to("tpu")[::3])
    torch.testing.assert_close(strided.mantissa.cpu(), want.mantissa[::3], equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(strided.exponent.cpu(), want.exponent[::3])
    m = torch.empty(x.shape, dtype=dtype, device="tpu")
    e = torch.empty(x.shape, dtype=torch.int32, device="tpu")
    torch.frexp(x.to("tpu"), out=(m, e))
    torch.testing.assert_close(m.cpu(), want.mantissa, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(e.cpu(), want.exponent)
    assert_no_fallback("frexp")


def test_frexp_out_dtypes_are_checked():
    x = torch.randn(5)
    for m, e in ((torch.float64, torch.int32), (torch.float32, torch.int64)):
        with pytest.raises(RuntimeError, match="dtype"):
            torch.frexp(x, out=(torch.empty(5, dtype=m), torch.empty(5, dtype=e)))
        with pytest.raises(RuntimeError, match="dtype"):
            torch.frexp(x.to("tpu"), out=(torch.empty(5, dtype=m, device="tpu"),
                                          torch.empty(5, dtype=e, device="tpu")))


# ---- ndtri -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_ndtri(dtype):
    torch_tpu.reset_fallback_report()
    x = inputs(dtype, [0.0, -0.0, 1.0, 0.5, 0.5 + 1e-9, 0.25, 0.975, 1e-10, 1e-300, 1 - 1e-12, 1e-40, -0.1, 1.1,
                       INF, -INF, NAN], 0, 1)
    if dtype in (torch.float16, torch.bfloat16):
        _rejects(S.ndtri, x)
        return
    want = S.ndtri(x)
    xt = x.to("tpu")
    torch.testing.assert_close(S.ndtri(xt).cpu(), want, equal_nan=True)
    torch.testing.assert_close(S.ndtri(xt[::3]).cpu(), want[::3], equal_nan=True)
    check_out_and_inplace(S.ndtri, None, x, want)
    assert_no_fallback("special_ndtri")


# ---- Bessel functions: modified of the first and second kind, spherical j0 ----

BESSEL = ["modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
          "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0"]
_BESSEL_X = [0.0, -0.0, 1e-300, 1e-10, 1e-3, 0.5, 1.0, 1.9999, 2.0, 2.0001, 2.5, 8.0, 8.5, 10.0, 30.0, 88.0, 100.0,
             700.0, 800.0, -0.5, -1.0, -2.5, -10.0, -100.0, INF, -INF, NAN]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name", BESSEL)
def test_bessel(name, dtype):
    torch_tpu.reset_fallback_report()
    fn = getattr(S, name)
    x = inputs(dtype, _BESSEL_X, -40, 40)
    if dtype in (torch.float16, torch.bfloat16):
        _rejects(fn, x)
        return
    want = fn(x)
    xt = x.to("tpu")
    got = fn(xt)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(fn(xt[::3]).cpu(), want[::3], equal_nan=True)
    if dtype.is_floating_point:  # the second-kind functions over (0, 4], where the two methods meet at 2
        small = torch.rand(500, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype) * 4
        torch.testing.assert_close(fn(small.to("tpu")).cpu(), fn(small), equal_nan=True)
    check_out_and_inplace(fn, None, x, want)
    assert_no_fallback(f"special_{name}")


# ---- Bessel functions of the first and second kind, Airy Ai ----------------------
# The CPU's rational approximations (kernels/special.c follows them): float64
# results agree to 1e-12 (an accurate J0 is 4e-7 off the CPU just above x = 5).

JY_AIRY = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai"]
_JY_X = _BESSEL_X + [4.9999, 5.0, 5.0001, -5.0, 1e-5, 9.99e-6, 2.09, 2.0899, -2.09, -2.0901, 8.3203353, 8.33,
                     103.892, 103.9, -103.9, 2.404825557695773, 3.8317059702075125, 0.8935769662791675, 1e10, -1e10,
                     1e20, 3e38]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("name", JY_AIRY)
def test_bessel_jy_airy(name, dtype):
    torch_tpu.reset_fallback_report()
    fn = getattr(S, name)
    x = inputs(dtype, _JY_X, -40, 40)
    if dtype in (torch.float16, torch.bfloat16):
        _rejects(fn, x)
        return
    tol = dict(rtol=1e-12, atol=1e-15) if dtype == torch.float64 else {}
    want = fn(x)
    xt = x.to("tpu")
    got = fn(xt)
    assert got.dtype == want.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)
    torch.testing.assert_close(fn(xt[::3]).cpu(), want[::3], equal_nan=True, **tol)
    if dtype.is_floating_point:  # each method's range and its edges, and large arguments
        g = torch.Generator().manual_seed(3)
        wide = torch.cat([torch.rand(2000, generator=g, dtype=torch.float64) * 12 - 6,
                          torch.randn(500, generator=g, dtype=torch.float64) * 1e4]).to(dtype).reshape(50, 50)
        torch.testing.assert_close(fn(wide.to("tpu")).cpu(), fn(wide), equal_nan=True, **tol)
        torch.testing.assert_close(fn(wide.to("tpu").t()).cpu(), fn(wide.t()), equal_nan=True, **tol)
    check_out_and_inplace(fn, None, x, want)
    assert_no_fallback(f"special_{name}")


def test_bessel_jy_airy_values():
    """A few values against their true values (mpmath): the CPU's approximations
    are within 1e-11 of them for |x| < 5, 1e-6 beyond."""
    x = torch.tensor([0.0, 2.404825557695773, 3.8317059702075125, 1.0, 10.0, -3.0], dtype=torch.float64, device="tpu")
    j0 = S.bessel_j0(x).cpu()
    assert j0[0] == 1.0 and abs(j0[1]) < 1e-12 and abs(j0[3] - 0.765197686557967) < 1e-11
    j1 = S.bessel_j1(x).cpu()
    assert j1[0] == 0.0 and abs(j1[2]) < 1e-12 and abs(j1[5] + 0.3390589585259360) < 1e-11
    y = S.bessel_y0(x).cpu()
    assert y[0] == -float("inf") and y[5].isnan() and abs(y[4] - 0.0556711672835994) < 1e-6
    y = S.bessel_y1(x).cpu()
    assert y[0] == -float("inf") and abs(y[3] + 0.781212821300289) < 1e-11
    ai = S.airy_ai(x).cpu()
    assert abs(ai[0] - 0.3550280538878172) < 1e-15 and abs(ai[3] - 0.135292416312881) < 1e-11
    assert abs(ai[5] + 0.378814293677658) < 1e-7
    assert S.airy_ai(torch.tensor([float("inf"), -float("inf"), 200.0], device="tpu")).cpu()[:2].isnan().all()


# ---- orthogonal polynomials --------------------------------------------------------

POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]
# x: +-1 and 0 (the closed forms), the interval's inside and outside; n: negative,
# the thresholds of the trigonometric forms, large, fractional, huge and NaN
_POLY_X = [-1.0, 1.0, 0.0, -0.0, 0.5, -0.5, 0.25, 0.75, 0.99999994, -0.99999994, 1e-3, 1.5, -1.5, 2.0, -3.0,
           INF, -INF, NAN]
_POLY_N = [-3.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 20.0, 50.0, 2.5, -0.5, 1e20,
           INF, -INF, NAN]


def _rand_poly(g):
    x = torch.rand(300, generator=g, dtype=torch.float64) * 3 - 1.5
    n = torch.randint(0, 30, (300,), generator=g).to(torch.float64)
    return x, n


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("name", POLYS)
def test_polynomial(name, dtype):
    torch_tpu.reset_fallback_report()
    fn = getattr(S, name)
    if dtype.is_floating_point:
        x, n = _cross(_POLY_X, _POLY_N, dtype, _rand_poly)
    else:
        x = inputs(dtype, [], 0, 1)
        n = (x.abs() % 12) if dtype != torch.bool else x
    if dtype in (torch.float16, torch.bfloat16):
        _rejects(fn, x, n)
        return
    check_binary(fn, None, x, n)
    assert_no_fallback(f"special_{name}")


@pytest.mark.parametrize("name", POLYS)
def test_polynomial_scalar_overloads(name):
    """x_scalar and n_scalar route to the tensor form (CompositeExplicitAutograd)."""
    torch_tpu.reset_fallback_report()
    fn = getattr(S, name)
    x, n = _cross(_POLY_X, _POLY_N, torch.float32, _rand_poly)
    xt, nt = x.to("tpu"), n.to("tpu")
    for k in (0, 3, 7, 12):
        torch.testing.assert_close(fn(xt, k).cpu(), fn(x, k), equal_nan=True)
    for v in (-1.0, 0.5, 0.3, 1.25):
        torch.testing.assert_close(fn(v, nt).cpu(), fn(v, n), equal_nan=True)
    out = torch.empty(x.shape, device="tpu")
    fn(xt, 5, out=out)
    torch.testing.assert_close(out.cpu(), fn(x, 5), equal_nan=True)
    assert_no_fallback(f"special_{name}")

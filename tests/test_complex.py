"""Complex tensors (and other dtypes without kernels: float8) on tpu: storage,
copies with the lazy conjugate/negative bits, ops computed on real views
(torch_tpu/_complex.py) with the CPU fallback forbidden, the counted fallback
for ops without a rule, autograd and torch.compile through them. Everything is
compared with the CPU's results."""
import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch_tpu
from torch_tpu import _decomp

DEV = "tpu"


def rand(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def same(a, b) -> bool:
    """Bit equality of two complex tensors (complex32 included: the CPU has no equal for it)."""
    return a.dtype == b.dtype and torch.equal(torch.view_as_real(a), torch.view_as_real(b))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.complex32])
def test_round_trip_and_views(dtype):
    x = rand(3, 5, dtype=torch.complex64).to(dtype)
    t = x.to(DEV)
    assert t.dtype == dtype and t.device.type == DEV
    assert same(t.cpu(), x)
    # real/imag are views of the device bytes: writes go through
    t.real.fill_(2.0)
    x.real.fill_(2.0)
    assert same(t.cpu(), x)
    assert same(t[1:, ::2].cpu(), x[1:, ::2].clone())
    assert same(t.t().contiguous().cpu(), x.t().contiguous())


def test_conjugate_and_negative_bits_in_copies():
    x = rand(4, 3)
    t = x.to(DEV)
    # tpu -> cpu of a conjugate view; cpu -> tpu of one; tpu -> tpu
    assert torch.equal(t.conj().cpu(), x.conj().resolve_conj())
    assert torch.equal(x.conj().to(DEV).cpu(), x.conj().resolve_conj())
    assert torch.equal(t.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(t.conj().resolve_conj().cpu(), x.conj().resolve_conj())
    # the negative bit: the imaginary part of a conjugate
    assert torch.equal(t.conj().imag.cpu(), x.conj().imag)
    assert torch.equal(t.conj().imag.clone().cpu(), x.conj().imag.clone())
    # copy_ into a conjugate view writes conj(src) into its bytes
    d = torch.zeros(4, 3, dtype=torch.complex64, device=DEV)
    d.conj().copy_(t)
    assert torch.equal(d.cpu(), x.conj().resolve_conj())
    # between chips
    if torch.tpu.device_count() > 1:
        assert torch.equal(t.conj().to("tpu:1").cpu(), x.conj().resolve_conj())


def test_casts_between_real_and_complex():
    r = torch.randn(3, 4)
    x = rand(3, 4)
    assert torch.equal(r.to(DEV).to(torch.complex64).cpu(), r.to(torch.complex64))
    assert torch.equal(r.double().to(DEV).to(torch.complex64).cpu(), r.double().to(torch.complex64))
    assert torch.equal(x.to(DEV).to(torch.complex128).cpu(), x.to(torch.complex128))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "discards the imaginary part" (once a process: see the last test)
        assert torch.equal(x.to(DEV).to(torch.float32).cpu(), x.real)
    d = torch.zeros(2, 3, 4, dtype=torch.complex64, device=DEV)
    d.copy_(r.to(DEV))  # broadcast, real into complex
    assert torch.equal(d.cpu(), r.to(torch.complex64).expand(2, 3, 4))


UNARY = ["neg", "conj_physical", "abs", "angle", "sgn", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
         "tan", "sinh", "cosh", "tanh", "log2", "log10", "isnan", "isinf", "isfinite", "asin", "acos", "atan",
         "asinh", "acosh", "atanh", "log1p"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_on_real_views(no_fallback, name):
    x = rand(64, seed=1) * 3
    x[0] = 0
    x[1] = complex(-4, 0.0)
    x[2] = complex(-4, -0.0)
    x[3] = complex(float("nan"), 1)
    x[4] = complex(float("inf"), 1)
    fn = getattr(torch, name)
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), equal_nan=True)


def test_rules_run_and_are_counted(no_fallback):
    _decomp.reset_decomposition_report()
    (rand(3).to(DEV) * rand(3).to(DEV)).cpu()
    assert _decomp.decomposition_report().get("aten.mul.Tensor") == 1, _decomp.decomposition_report()
    _decomp.reset_decomposition_report()


BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("add_alpha", lambda a, b: torch.add(a, b, alpha=2 - 1j)),
    ("rsub_scalar", lambda a, b: 3 - 2j - a), ("mul_scalar", lambda a, b: a * (0.5 + 2j)),
    ("div_real", lambda a, b: a / b.real), ("real_div", lambda a, b: b.real / a),
    ("eq", lambda a, b: a == torch.where(b.real > 0, a, b)), ("ne", lambda a, b: a != b),
    ("where", lambda a, b: torch.where(a.real > 0, a, b)), ("where_scalar", lambda a, b: torch.where(a.real > 0, a, 1j)),
]


@pytest.mark.parametrize("name,fn", BINARY, ids=[n for n, _ in BINARY])
def test_binary_on_real_views(no_fallback, name, fn):
    a, b = rand(5, 6, seed=2), rand(6, seed=3)
    b[0] = 0
    torch.testing.assert_close(fn(a.to(DEV), b.to(DEV)).cpu(), fn(a, b), equal_nan=True)


def test_division_follows_the_cpu_for_zero_and_huge_divisors(no_fallback):
    a = torch.tensor([1 + 1j, 0j, 1e30 + 1e30j, 2 - 3j], dtype=torch.complex64)
    b = torch.tensor([0j, 0j, 1e30 + 1e30j, 1e-30 + 1e-30j], dtype=torch.complex64)
    torch.testing.assert_close((a.to(DEV) / b.to(DEV)).cpu(), a / b, equal_nan=True)


def test_promotion_and_inplace(no_fallback):
    a, b = rand(4, 4, seed=4), rand(4, 4, seed=5, dtype=torch.complex128)
    r = torch.randn(4, 4, dtype=torch.float64)
    got = a.to(DEV) * r.to(DEV)
    assert got.dtype == torch.complex128
    torch.testing.assert_close(got.cpu(), a * r)
    torch.testing.assert_close((a.to(DEV) + b.to(DEV)).cpu(), a + b)
    t = a.to(DEV)
    t.mul_(1j).add_(b.to(DEV).to(torch.complex64))
    torch.testing.assert_close(t.cpu(), a * 1j + b.to(torch.complex64))
    with pytest.raises(RuntimeError, match="can't be cast"):
        r.to(DEV).add_(a.to(DEV))
    with pytest.raises(RuntimeError):
        torch.ones(3, device=DEV).fill_(1j)


def test_reductions_and_data_movement(no_fallback):
    x = rand(4, 5, 6, seed=6)
    t = x.to(DEV)
    checks = [
        lambda z: z.sum(), lambda z: z.sum((0, 2), keepdim=True), lambda z: z.mean(-1),
        lambda z: torch.var(z, 1), lambda z: torch.std(z, (0, 1), correction=0), lambda z: torch.var_mean(z, 2)[0],
        lambda z: torch.cat([z, z.conj()], 1), lambda z: torch.stack([z, z], -1),
        lambda z: z[:, [0, 2, 4]], lambda z: z[z.real > 0],
        lambda z: z.flip(0, -1), lambda z: z.roll(2, 1), lambda z: z.roll(3),
        lambda z: torch.gather(z, 2, torch.tensor([[[0, 5]] * 5] * 4, device=z.device)),
        lambda z: z.masked_fill(z.real > 0, 2 - 1j), lambda z: torch.zeros_like(z) + 1,
        lambda z: torch.full_like(z, 3 + 4j), lambda z: z @ z.transpose(-1, -2).conj(),
        lambda z: torch.mm(z[0], z[1].T), lambda z: torch.bmm(z, z.transpose(1, 2)),
        lambda z: torch.mv(z[0], z[0, 0]), lambda z: torch.dot(z[0, 0], z[1, 1]),
        lambda z: z.index_put((torch.tensor([0, 3], device=z.device),), z[1:3] * 2),
        lambda z: torch.complex(z.real, z.imag), lambda z: torch.polar(z.abs(), z.angle()),
        lambda z: torch.matrix_exp(z[0, :5, :5] * 0.1),
    ]
    for i, f in enumerate(checks):
        torch.testing.assert_close(f(t).cpu(), f(x), msg=lambda m: f"check {i}: {m}")


def test_llama4_style_rotary_on_device(no_fallback):
    """Llama 4 / DeepSeek-V2's rotary embedding: complex frequencies from
    torch.polar, view_as_complex, a complex product, view_as_real."""
    def rope(q, inv_freq, pos):
        freqs = torch.outer(pos, inv_freq)
        cis = torch.polar(torch.ones_like(freqs), freqs)
        qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(qc * cis[None, :, None, :]).flatten(3).type_as(q)

    q = torch.randn(2, 7, 4, 16)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    pos = torch.arange(7).float()
    expected = rope(q, inv_freq, pos)
    torch.testing.assert_close(rope(q.to(DEV), inv_freq.to(DEV), pos.to(DEV)).cpu(), expected)
    compiled = torch.compile(rope, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(q.to(DEV), inv_freq.to(DEV), pos.to(DEV)).cpu(), expected)


def test_autograd_through_complex_intermediates(no_fallback):
    w = torch.randn(6, 2, requires_grad=True)
    z = rand(6, seed=7)

    def loss(w, z):
        c = torch.view_as_complex(w) * z
        return (c.abs() ** 2).sum() + torch.view_as_real(c * c.conj()).sum()

    loss(w, z).backward()
    wt = w.detach().to(DEV).requires_grad_()
    loss(wt, z.to(DEV)).backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad)


_SPECIAL = [0.0, -0.0, 1.0, -2.0, 0.5, 3.0, math.inf, -math.inf, math.nan]


def _close_or_same_special(got, want):
    """assert_close with equal nans, where infinities must agree in sign (the special values
    of C99's Annex G: the CPU computes complex exp, sqrt, log and pow with glibc's)."""
    g, w = torch.view_as_real(got.cpu()), torch.view_as_real(want)
    ok = torch.isclose(g, w, rtol=1.3e-6, atol=1e-5, equal_nan=True)
    assert bool(ok.all()), [(got.cpu().reshape(-1)[i].item(), want.reshape(-1)[i].item())
                            for i in (~ok).any(-1).reshape(-1).nonzero().flatten()[:8]]


def test_special_values_follow_c99(no_fallback):
    """Every pair of parts from 0, -0, finite values, +-inf and nan: exp, log, sqrt, products
    and powers (the CPU's special cases for 0.5, 2, 3, -0.5, -1, -2; cpow otherwise, whose
    product recovers infinities: 0 ** 2.5 = 0, 0 ** -1.5 = inf + nan i, 0 ** 0j = nan)."""
    # 1e30: finite, but sin(1e30i) = 0 + inf i where sin(0) cosh(1e30) is 0 * inf
    big = torch.tensor([complex(a, b) for a in _SPECIAL + [1e30] for b in _SPECIAL + [1e30]], dtype=torch.complex64)
    for name in ("exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh",
                 "acosh", "atanh", "log1p"):
        _close_or_same_special(getattr(torch, name)(big.to(DEV)), getattr(torch, name)(big))
    # Products that overflow are left out: the CPU's own answer then depends on its code path
    # ((1e30 + 1e30i)^2 is -inf + inf i in its scalar loop, contracted to an FMA, and nan + inf i
    # in its vector loop).
    z = torch.tensor([complex(a, b) for a in _SPECIAL for b in _SPECIAL], dtype=torch.complex64)
    t = z.to(DEV)
    _close_or_same_special(t * t.flip(0), z * z.flip(0))
    for e in (2.5, 0, 1, 0.5, 2, 3, -0.5, -1, -2, 1j, -1.5, 2 + 1j, 0j):
        _close_or_same_special(torch.pow(t, e), torch.pow(z, e))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_inverse_functions_near_branch_points(no_fallback, dtype):
    """Kahan's formulas for asin, acos, acosh (asinh, atan from them), atanh and log1p
    stay within the CPU's tolerance at every magnitude and next to the branch points
    +-1, +-i, where the textbook logarithm forms cancel."""
    g = torch.Generator().manual_seed(21)
    z = torch.cat([torch.randn(500, dtype=dtype, generator=g) * s for s in (1e-3, 1, 4, 1e3)]
                  + [torch.tensor([1, -1, 1j, -1j, 0, 2, -2, 2j, -2j, 1 + 1e-7j, -1 - 1e-7j, 1e-20 + 1e-20j,
                                   -0.008 + 0.986j, -1.108 - 0.031j], dtype=dtype)])
    for name in ("asin", "acos", "acosh", "asinh", "atan", "atanh", "log1p"):
        fn = getattr(torch, name)
        torch.testing.assert_close(fn(z.to(DEV)).cpu(), fn(z), msg=lambda m, name=name: f"{name}: {m}")


def test_powers_and_products(no_fallback):
    a, e = rand(6, 7, seed=11), rand(6, 7, seed=12)
    a[0, :3] = 0
    e[1, :2] = 0
    r = torch.randn(6, 7, generator=torch.Generator().manual_seed(13))
    at, et, rt = a.to(DEV), e.to(DEV), r.to(DEV)
    _close_or_same_special(torch.pow(at, et), torch.pow(a, e))
    _close_or_same_special(torch.pow(rt, et), torch.pow(r, e))  # real base, complex exponent
    _close_or_same_special(at ** 0.75, a ** 0.75)
    for base in (2.0, 0.0, 1j, -3.0):
        _close_or_same_special(torch.pow(base, et), torch.pow(base, e))
    b = at.clone()
    b.pow_(1.5)
    torch.testing.assert_close(b.cpu(), a.pow(1.5))
    x = rand(3, 9, 5, dtype=torch.complex128, seed=14) * 0.9
    xt = x.to(DEV)
    torch.testing.assert_close(xt.prod().cpu(), x.prod())
    for d in (0, 1, -1):
        torch.testing.assert_close(xt.prod(d).cpu(), x.prod(d))
        torch.testing.assert_close(xt.prod(d, keepdim=True).cpu(), x.prod(d, keepdim=True))
    torch.testing.assert_close(xt.prod(1, dtype=torch.complex64).cpu(), x.prod(1, dtype=torch.complex64))
    empty = torch.zeros(2, 0, dtype=torch.complex64)
    torch.testing.assert_close(empty.to(DEV).prod(1).cpu(), empty.prod(1))


def test_ops_without_a_rule_take_the_counted_fallback():
    a = rand(4, 4, seed=8) + 4 * torch.eye(4)
    torch_tpu.reset_fallback_report()
    got = torch.linalg.inv(a.to(DEV)).cpu()
    torch.testing.assert_close(got, torch.linalg.inv(a))
    assert any("linalg_inv" in k for k in torch_tpu.fallback_report()), torch_tpu.fallback_report()
    torch_tpu.reset_fallback_report()


def test_no_fallback_names_the_complex_op():
    os.environ["TORCH_TPU_FALLBACK"] = "error"
    try:
        with pytest.raises(NotImplementedError, match=r"aten::linalg_inv_ex \(tensor arguments: ComplexFloat\)"):
            torch.linalg.inv(rand(3, 3).to(DEV))
    finally:
        del os.environ["TORCH_TPU_FALLBACK"]


def test_random_fills(no_fallback):
    t = torch.empty(1000, dtype=torch.complex64, device=DEV)
    t.normal_()
    v = torch.view_as_real(t).cpu()
    # each part has variance 1/2, as on the CPU
    assert abs(v.var().item() - 0.5) < 0.1
    t.uniform_(-1, 1)
    v = torch.view_as_real(t).cpu()
    assert v.min() >= -1 and v.max() <= 1 and v.std() > 0.3


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32])
def test_dtypes_without_kernels_copy_and_convert(dtype):
    r = torch.randn(5, 7) * 4
    c = r.to(dtype)
    t = r.to(DEV).to(dtype)
    assert t.dtype == dtype
    assert torch.equal(t.cpu().view(torch.uint8) if dtype.itemsize == 1 else t.cpu(),
                       c.view(torch.uint8) if dtype.itemsize == 1 else c)
    assert torch.equal(t.to(torch.float32).cpu(), c.to(torch.float32))
    assert torch.equal(t[:, 1::2].contiguous().to(torch.float32).cpu(), c[:, 1::2].to(torch.float32))


def test_ifft_of_a_device_tensor_in_a_fresh_process():
    """Once a segfault (the CPU fallback left a complex tensor on tpu). And the
    warning a complex-to-real cast gives on the CPU, once a process."""
    code = """
import torch, torch_tpu
import warnings
x = torch.randn(5)
torch.testing.assert_close(torch.fft.ifft(x.to("tpu")).cpu(), torch.fft.ifft(x))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    z = torch.fft.ifft(x.to("tpu")).to(torch.float32)
assert any("discards the imaginary part" in str(m.message) for m in w), [str(m.message) for m in w]
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


FFTS = [
    ("fft", lambda x: torch.fft.fft(x)), ("ifft_ortho", lambda x: torch.fft.ifft(x, norm="ortho")),
    ("fft2", lambda x: torch.fft.fft2(x)), ("fftn_dims", lambda x: torch.fft.fftn(x, dim=(0, 2))),
    ("rfft", lambda x: torch.fft.rfft(x.real)), ("irfft", lambda x: torch.fft.irfft(x, n=13)),
    ("rfftn", lambda x: torch.fft.rfftn(x.real)), ("irfftn", lambda x: torch.fft.irfftn(x, dim=(1, 2))),
    ("hfft", lambda x: torch.fft.hfft(x)), ("ihfft", lambda x: torch.fft.ihfft(x.real)),
    ("fft_n", lambda x: torch.fft.fft(x, n=29, dim=1)), ("fftshift", lambda x: torch.fft.fftshift(x)),
    ("stft", lambda x: torch.stft(x.real.flatten(), 16, return_complex=True,
                                  window=torch.hann_window(16, device=x.device))),
    ("istft", lambda x: torch.istft(torch.stft(x.real.flatten(), 16, return_complex=True,
                                               window=torch.hann_window(16, device=x.device)),
                                    16, window=torch.hann_window(16, device=x.device))),
]


@pytest.mark.parametrize("name,fn", FFTS, ids=[n for n, _ in FFTS])
def test_fft_on_the_device(no_fallback, name, fn):
    x = rand(4, 6, 10, seed=9)
    tol = dict(rtol=1e-5, atol=1e-4)  # the fft OpInfos' float32 tolerances
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), **tol)


def test_fft_gradients(no_fallback):
    x = torch.randn(3, 16, requires_grad=True)

    def loss(x):
        return torch.fft.rfft(x).abs().sum() + torch.fft.irfft(torch.fft.fft(x)[:, :9]).pow(2).sum()

    loss(x).backward()
    xt = x.detach().to(DEV).requires_grad_()
    loss(xt).backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-4)

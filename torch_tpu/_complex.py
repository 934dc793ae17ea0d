"""Complex tensors on tpu: ATen ops on complex data as ops on real views.

Complex tensors live on the device as bytes like any other (the bridge
copies them, csrc/aten/ops.cpp native_copy), but the C kernel ABI has real
dtypes only: a call with a complex tensor or a complex Scalar never reaches a
kernel. The bridge sends it here first (through torch_tpu._decomp.run); a rule
computes the op from the real and imaginary parts, `torch.view_as_real` views
of the operands, with ops that run natively. An op without a rule takes
PyTorch's decomposition table, then the counted CPU fallback.

Each rule is the functional op (`mul`, `sum`, ...) with its ATen argument
names; in-place overloads (`mul_`) write the functional result back into
`self` (PyTorch's cast rule applies), out= overloads are handled by
_decomp.run. A rule returns NotImplemented for calls it does not cover (the
fallback then computes them).
"""
from __future__ import annotations

import cmath
import math
import numbers
import operator

import torch

aten = torch.ops.aten


# ---- operands as (real, imaginary) parts ----------------------------------------


def involved(args, kwargs) -> bool:
    """Whether a call has a complex tensor (at any depth of lists) or a complex number."""
    def has(x):
        if isinstance(x, torch.Tensor):
            return x.is_complex()
        if isinstance(x, complex):
            return True
        if isinstance(x, (list, tuple)):
            return any(has(e) for e in x)
        return False
    return any(has(a) for a in args) or any(has(v) for v in kwargs.values())


def _rv(z: torch.Tensor) -> torch.Tensor:
    """The real view [..., 2] of a complex tensor's value (lazy conj/neg bits applied)."""
    if z.is_conj():
        z = z.resolve_conj()
    if z.is_neg():
        z = z.resolve_neg()
    return torch.view_as_real(z)


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}.get(dtype, dtype)


def _complex_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.float32: torch.complex64, torch.float64: torch.complex128,
            torch.float16: torch.complex32}.get(dtype, dtype)


def _parts(x, rdtype):
    """(re, im) of an operand in real dtype `rdtype`: tensors (im None for a real
    one) or Python numbers (im None for a real one)."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            v = _rv(x)
            re, im = v[..., 0], v[..., 1]
        else:
            re, im = x, None
        if re.dtype != rdtype:
            re = re.to(rdtype)
            im = None if im is None else im.to(rdtype)
        return re, im
    if isinstance(x, complex):
        return x.real, x.imag
    return x, None


def _join(re, im, cdtype, like=None):
    """The complex tensor of dtype `cdtype` with parts re, im (tensors or numbers; im None: 0)."""
    rdtype = _real_of(cdtype)
    dev = like.device if like is not None else next(t.device for t in (re, im) if isinstance(t, torch.Tensor))
    def t(x):
        if x is None:
            return None
        return x.to(rdtype) if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=rdtype, device=dev)
    re, im = t(re), t(im)
    if im is None:
        im = torch.zeros((), dtype=rdtype, device=dev)
    re, im = torch.broadcast_tensors(re, im)
    if cdtype == torch.complex32:  # no stack/view for chalf on every path: go through complex64
        return torch.view_as_complex(torch.stack((re.float(), im.float()), -1).contiguous()).to(cdtype)
    return torch.view_as_complex(torch.stack((re, im), -1).contiguous())


def _neg(x):
    return None if x is None else -x


def _add_parts(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _mul_parts(ar, ai, br, bi, op=operator.mul):
    """(ar + i ai) op (br + i bi) for a bilinear op (a product, mm, ...), absent
    (None) imaginary parts skipped; the imaginary part is None when both are."""
    re = op(ar, br)
    if ai is not None and bi is not None:
        re = re - op(ai, bi)
    im = _add_parts(None if bi is None else op(ar, bi), None if ai is None else op(ai, br))
    return re, im


def _result_dtype(a, b) -> torch.dtype:
    return torch.result_type(a, b)


def _device_of(*xs):
    for x in xs:
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            return x
    return next(x for x in xs if isinstance(x, torch.Tensor))


# ---- arithmetic --------------------------------------------------------------------


def _binary_setup(a, b):
    cd = _result_dtype(a, b)
    if not cd.is_complex:
        return None
    rd = _real_of(cd)
    return cd, rd, _parts(a, rd), _parts(b, rd)


def _scaled(parts, alpha, rd):
    """alpha * (re, im) for a Python number alpha (possibly complex)."""
    if alpha == 1:
        return parts
    ar, ai = (alpha.real, alpha.imag) if isinstance(alpha, complex) else (alpha, None)
    if ai == 0:
        ai = None
    br, bi = parts
    if isinstance(br, numbers.Number) and (bi is None or isinstance(bi, numbers.Number)):
        v = complex(br, bi or 0) * alpha
        return v.real, v.imag
    return _mul_parts(ar, ai, br, bi)


def add(self, other, alpha=1):
    s = _binary_setup(self, other)
    if s is None:
        return NotImplemented
    cd, rd, (ar, ai), b = s
    br, bi = _scaled(b, alpha, rd)
    return _join(_add_parts(ar, br), _add_parts(ai, bi), cd, _device_of(self, other))


def sub(self, other, alpha=1):
    return add(self, other, -alpha if not isinstance(alpha, bool) else -int(alpha))


def rsub(self, other, alpha=1):
    if isinstance(other, torch.Tensor):
        return sub(other, self, alpha)
    s = _binary_setup(self, other)
    if s is None:
        return NotImplemented
    cd, rd, a, (br, bi) = s
    ar, ai = _scaled(a, alpha, rd)
    return _join(br - ar if not isinstance(ar, numbers.Number) else (-ar + br), _add_parts(bi, _neg(ai)), cd,
                 _device_of(self, other))


def mul(self, other):
    s = _binary_setup(self, other)
    if s is None:
        return NotImplemented
    cd, rd, (ar, ai), (br, bi) = s
    re, im = _mul_parts(ar, ai, br, bi)
    return _join(re, im, cd, _device_of(self, other))


def div(self, other, *, rounding_mode=None):
    if rounding_mode is not None:
        return NotImplemented  # the CPU raises for complex: let it say so
    s = _binary_setup(self, other)
    if s is None:
        return NotImplemented
    cd, rd, (ar, ai), (br, bi) = s
    dev = _device_of(self, other)
    if bi is None:
        return _join(ar / br, None if ai is None else ai / br, cd, dev)
    if isinstance(br, numbers.Number):
        br = torch.tensor(br, dtype=rd, device=dev.device)
        bi = torch.tensor(bi, dtype=rd, device=dev.device)
    ai = torch.zeros((), dtype=rd, device=dev.device) if ai is None else ai
    # Smith's method, as c10::complex divides: scale by the larger part of the divisor.
    big_re = br.abs() >= bi.abs()
    rat = torch.where(big_re, bi / br, br / bi)
    den = torch.where(big_re, br + bi * rat, bi + br * rat)
    re = torch.where(big_re, ar + ai * rat, ar * rat + ai) / den
    im = torch.where(big_re, ai - ar * rat, ai * rat - ar) / den
    # 0/0 along both parts: the CPU divides by the zero parts (inf or nan)
    zero = (br == 0) & (bi == 0)
    if bool(zero.any()):
        re = torch.where(zero, ar / br.abs(), re)
        im = torch.where(zero, ai / bi.abs(), im)
    return _join(re, im, cd, dev)


def true_divide(self, other):
    return div(self, other)


def _unary(parts_fn, real=False, special=None):
    """A rule for a unary op from a function of the real and imaginary parts
    (real tensors) returning (re, im), or one real tensor when `real`.

    special: the op itself (torch.sin, ...), for functions whose formulas here hold for
    finite values only. Elements with an infinite or nan part in the input or in the
    result (C99's special values, overflow such as sin(1e30i) = 0 + inf i where the
    formula gives 0 * inf) are then computed again by the CPU, which follows C99's
    Annex G (glibc), and put back: one synchronisation per call, a copy of those
    elements only."""
    def rule(self):
        if not self.is_complex():
            return NotImplemented
        v = _rv(self)
        x, y = v[..., 0], v[..., 1]
        out = parts_fn(x, y)
        if real:
            return out
        res = _join(*out, self.dtype, self)
        if special is not None and self.numel():
            bad = ~(torch.isfinite(x) & torch.isfinite(y) & torch.isfinite(out[0]) & torch.isfinite(out[1]))
            if bool(bad.any()):
                idx = bad.nonzero(as_tuple=True)
                res[idx] = special(self[idx].cpu()).to(res.device)
        return res
    rule.__doc__ = parts_fn.__doc__
    return rule


def neg(self):
    if not self.is_complex():
        return NotImplemented
    return torch.view_as_complex(-_rv(self))


def resolve_conj(self):
    if not self.is_complex():
        return NotImplemented
    out = torch.empty_like(self)
    out.copy_(self)  # the bridge's _copy_from applies the bit
    return out


def reciprocal(self):
    if not self.is_complex():
        return NotImplemented
    return div(torch.ones((), dtype=self.dtype, device=self.device).expand(self.shape), self)


def _sgn(x, y):
    a = torch.hypot(x, y)
    nz = a != 0
    safe = torch.where(nz, a, torch.ones_like(a))
    return torch.where(nz, x / safe, 0.0), torch.where(nz, y / safe, 0.0)


def _exp(x, y):
    """exp(x) cis(y) with C99's special values (Annex G, as std::exp and cexp): a zero
    imaginary part stays zero (exp(inf + 0i) = inf + 0i), exp(-inf + i y) = 0 and
    exp(inf + i y) = inf + i nan for y infinite or nan."""
    m = torch.exp(x)
    re, im = m * torch.cos(y), m * torch.sin(y)
    bad_y = ~torch.isfinite(y)
    re = torch.where(y == 0, m, torch.where(bad_y & (x == -math.inf), 0.0,
                                            torch.where(bad_y & (x == math.inf), math.inf, re)))
    im = torch.where(y == 0, y, torch.where(bad_y & (x == -math.inf), 0.0,
                                            torch.where(bad_y & (x == math.inf), math.nan, im)))
    return re, im


def _sqrt(x, y):
    """The principal square root, from |z| without cancellation: the larger
    part first, the other one divided by it."""
    t = torch.sqrt((torch.hypot(x, y) + x.abs()) * 0.5)
    safe = torch.where(t == 0, torch.ones_like(t), t)
    other = y.abs() / (2 * safe) * (t != 0)
    re = torch.where(x >= 0, t, other)
    im = torch.where(x >= 0, y / (2 * safe) * (t != 0), torch.copysign(t, y))
    # C99's csqrt: sqrt(x +- i inf) = inf +- i inf for every x, nan included
    yinf = torch.isinf(y)
    return torch.where(yinf, math.inf, re), torch.where(yinf, y, im)


def _tanh(x, y):
    """Kahan's form, free of cancellation near the poles: with t = tan y,
    b = 1 + t^2, s = sinh x, tanh(x + iy) = (b s sqrt(1 + s^2) + i t) / (1 + b s^2);
    for |x| > 20, sign(x) + 2i sin(2y) exp(-2|x|)."""
    t = torch.tan(y)
    b = 1 + t * t
    s = torch.sinh(x)
    den = 1 + b * s * s
    big = x.abs() > 20
    re = torch.where(big, torch.sign(x), b * s * torch.sqrt(1 + s * s) / den)
    im = torch.where(big, torch.sin(2 * y) * 2 * torch.exp(-2 * x.abs()), t / den)
    return re, im


conj_physical = _unary(lambda x, y: (x, -y))
abs_ = _unary(torch.hypot, real=True)
angle = _unary(lambda x, y: torch.atan2(y, x), real=True)
isnan = _unary(lambda x, y: torch.isnan(x) | torch.isnan(y), real=True)
isinf = _unary(lambda x, y: torch.isinf(x) | torch.isinf(y), real=True)
isfinite = _unary(lambda x, y: torch.isfinite(x) & torch.isfinite(y), real=True)
sgn = _unary(_sgn)
exp = _unary(_exp)
log = _unary(lambda x, y: (torch.log(torch.hypot(x, y)), torch.atan2(y, x)))
sqrt = _unary(_sqrt)
tanh = _unary(_tanh, special=torch.tanh)
tan = _unary(lambda x, y: (lambda re, im: (im, -re))(*_tanh(-y, x)), special=torch.tan)  # tan(z) = -i tanh(iz)
sin = _unary(lambda x, y: (torch.sin(x) * torch.cosh(y), torch.cos(x) * torch.sinh(y)), special=torch.sin)
cos = _unary(lambda x, y: (torch.cos(x) * torch.cosh(y), -torch.sin(x) * torch.sinh(y)), special=torch.cos)
sinh = _unary(lambda x, y: (torch.sinh(x) * torch.cos(y), torch.cosh(x) * torch.sin(y)), special=torch.sinh)
cosh = _unary(lambda x, y: (torch.cosh(x) * torch.cos(y), torch.sinh(x) * torch.sin(y)), special=torch.cosh)


def _cmul(a, b):
    return _mul_parts(a[0], a[1], b[0], b[1])


def _asin(x, y):
    """Kahan's asin ("Branch cuts for complex elementary functions", 1987), accurate
    everywhere but at overflow: with s = sqrt(1 - z), t = sqrt(1 + z),
    asin z = atan2(x, Re(s t)) + i asinh(Im(conj(s) t))."""
    s, t = _sqrt(1 - x, -y), _sqrt(1 + x, y)
    re = torch.atan2(x, _cmul(s, t)[0])
    im = torch.asinh(_cmul((s[0], -s[1]), t)[1])
    return re, im


def _acos(x, y):
    """Kahan's acos: with s = sqrt(1 - z), t = sqrt(1 + z),
    acos z = 2 atan2(Re s, Re t) + i asinh(Im(conj(t) s))."""
    s, t = _sqrt(1 - x, -y), _sqrt(1 + x, y)
    return 2 * torch.atan2(s[0], t[0]), torch.asinh(_cmul((t[0], -t[1]), s)[1])


def _acosh(x, y):
    """Kahan's acosh: with s = sqrt(z - 1), t = sqrt(z + 1),
    acosh z = asinh(Re(conj(s) t)) + 2i atan2(Im s, Re t)."""
    s, t = _sqrt(x - 1, y), _sqrt(x + 1, y)
    return torch.asinh(_cmul((s[0], -s[1]), t)[0]), 2 * torch.atan2(s[1], t[0])


def _atanh(x, y):
    """atanh z = log1p(4x / ((1 - x)^2 + y^2)) / 4 + i atan2(2y, (1 - x)(1 + x) - y^2) / 2
    (the real part of (log(1 + z) - log(1 - z)) / 2 without cancellation), computed for
    the z with Re z >= 0 of the pair z, -z (atanh is odd): log1p's argument is then >= 0."""
    sg = torch.where(torch.signbit(x), -1.0, 1.0).to(x.dtype)
    x, y = x * sg, y * sg
    re = 0.25 * torch.log1p(4 * x / ((1 - x) * (1 - x) + y * y))
    return re * sg, 0.5 * torch.atan2(2 * y, (1 - x) * (1 + x) - y * y) * sg


def _log1p(x, y):
    """log(1 + z) without cancellation for small z: the real part as
    log1p(x (2 + x) + y^2) / 2 where that sum is small, else log|1 + z|."""
    small = (x.abs() < 0.5) & (y.abs() < 0.5)
    re = torch.where(small, 0.5 * torch.log1p(x * (2 + x) + y * y), torch.log(torch.hypot(1 + x, y)))
    return re, torch.atan2(y, 1 + x)


asin = _unary(_asin, special=torch.asin)
acos = _unary(_acos, special=torch.acos)
acosh = _unary(_acosh, special=torch.acosh)
atanh = _unary(_atanh, special=torch.atanh)
asinh = _unary(lambda x, y: (lambda a, b: (-b, a))(*_asin(y, -x)), special=torch.asinh)  # asinh z = i asin(-iz)
atan = _unary(lambda x, y: (lambda a, b: (b, -a))(*_atanh(-y, x)), special=torch.atan)  # atan z = -i atanh(iz)
log1p = _unary(_log1p, special=torch.log1p)


def rsqrt(self):
    r = sqrt(self)
    return r if r is NotImplemented else reciprocal(r)


def _log_base(base):
    def log_b(self):
        r = log(self)
        return r if r is NotImplemented else mul(r, 1.0 / math.log(base))
    return log_b


def _compare(self, other):
    s = _binary_setup(self, other)
    if s is None:
        return None
    cd, rd, (ar, ai), (br, bi) = s
    zero = 0.0
    re = ar == br
    im = (ai if ai is not None else zero) == (bi if bi is not None else zero)
    if not isinstance(im, torch.Tensor):
        im = torch.tensor(im, device=re.device if isinstance(re, torch.Tensor) else None)
    return re & im


def eq(self, other):
    r = _compare(self, other)
    return NotImplemented if r is None else r


def ne(self, other):
    r = _compare(self, other)
    return NotImplemented if r is None else ~r


# ---- construction and random ----------------------------------------------------------


def fill_(self, value):
    if not self.is_complex():
        return NotImplemented  # a complex value into a real tensor: the CPU's error
    v = torch.view_as_real(self._conj() if self.is_conj() else self)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            return NotImplemented
        re, im = _parts(value, v.dtype)
        v[..., 0].fill_(re)
        if im is None:
            v[..., 1].zero_()
        else:
            v[..., 1].fill_(im)
    else:
        value = complex(value)
        v[..., 0].fill_(value.real)
        v[..., 1].fill_(value.imag)
    if self.is_conj():
        v[..., 1].neg_()
    return self


def zero_(self):
    if not self.is_complex():
        return NotImplemented
    torch.view_as_real(self._conj() if self.is_conj() else self).zero_()
    return self


def complex_(real, imag):
    if real.is_complex() or imag.is_complex():
        return NotImplemented
    cd = _complex_of(torch.promote_types(real.dtype, imag.dtype))
    return _join(real, imag, cd, real)


def polar(abs, angle):  # noqa: A002 (ATen's argument names)
    if abs.is_complex() or angle.is_complex():
        return NotImplemented
    cd = _complex_of(torch.promote_types(abs.dtype, angle.dtype))
    return _join(abs * torch.cos(angle), abs * torch.sin(angle), cd, abs)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if not self.is_complex():
        return NotImplemented
    # as ATen: each part normal with std / sqrt(2)
    torch.view_as_real(self).normal_(mean, std / math.sqrt(2), generator=generator)
    return self


def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    if not self.is_complex():
        return NotImplemented
    torch.view_as_real(self).uniform_(from_, to, generator=generator)
    return self


# ---- reductions ---------------------------------------------------------------------


def _dims(dim, ndim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return [d % ndim if ndim else 0 for d in dim]


def _partwise_reduction(reduce):
    """A rule for sum/mean: the reduction of the real view over the same dims
    (each part reduced on its own), in dtype= when it is complex."""
    def rule(self, dim=None, keepdim=False, *, dtype=None):
        if not self.is_complex() or (dtype is not None and not dtype.is_complex):
            return NotImplemented
        x = self if dtype is None or dtype == self.dtype else self.to(dtype)
        if x.dim() == 0:
            return x.clone()
        return torch.view_as_complex(reduce(_rv(x), _dims(dim, x.dim()), keepdim=keepdim).contiguous())
    return rule


sum_ = _partwise_reduction(torch.sum)
mean = _partwise_reduction(torch.mean)


def var(self, dim=None, *, correction=None, keepdim=False):
    """Variance of complex data: the sum of the variances of both parts."""
    if not self.is_complex() or self.dim() == 0:
        return NotImplemented
    parts = torch.var(_rv(self), dim=_dims(dim, self.dim()), correction=correction, keepdim=keepdim)
    return parts.sum(-1)


def std(self, dim=None, *, correction=None, keepdim=False):
    r = var(self, dim, correction=correction, keepdim=keepdim)
    return r if r is NotImplemented else r.sqrt()


def var_mean(self, dim=None, *, correction=None, keepdim=False):
    r = var(self, dim, correction=correction, keepdim=keepdim)
    return r if r is NotImplemented else (r, mean(self, dim, keepdim))


def std_mean(self, dim=None, *, correction=None, keepdim=False):
    r = std(self, dim, correction=correction, keepdim=keepdim)
    return r if r is NotImplemented else (r, mean(self, dim, keepdim))


def prod(self, dim=None, keepdim=False, *, dtype=None):
    """The product over `dim` (all elements when None) as a tree of complex products of
    the real parts: pairs of neighbours multiplied, an odd last one carried over."""
    if not self.is_complex() or (dtype is not None and not dtype.is_complex):
        return NotImplemented
    x = self if dtype is None or dtype == self.dtype else self.to(dtype)
    if dim is None:
        x, d = x.reshape(-1), 0
    elif x.dim() == 0:
        return x.clone()
    else:
        d = dim % x.dim()
    v = _rv(x).movedim(d, -2)
    re, im = v[..., 0], v[..., 1]
    if re.shape[-1] == 0:
        re = torch.ones(re.shape[:-1] + (1,), dtype=re.dtype, device=re.device)
        im = torch.zeros_like(re)
    while re.shape[-1] > 1:
        n = re.shape[-1] // 2 * 2
        pr, pi = _mul_parts(re[..., 0:n:2], im[..., 0:n:2], re[..., 1:n:2], im[..., 1:n:2])
        re, im = torch.cat([pr, re[..., n:]], -1), torch.cat([pi, im[..., n:]], -1)
    out = _join(re[..., 0], im[..., 0], x.dtype, x)
    return out.unsqueeze(d) if keepdim and dim is not None else out


# ---- powers -------------------------------------------------------------------------------

# exponent -> the CPU's special case for a Python-number exponent (ATen's pow_tensor_scalar)
_POW_SCALAR = {0.5: lambda z: sqrt(z), 2.0: lambda z: mul(z, z), 3.0: lambda z: mul(mul(z, z), z),
               -0.5: lambda z: rsqrt(z), -1.0: lambda z: reciprocal(z), -2.0: lambda z: reciprocal(mul(z, z))}


def pow_(self, exponent):
    """self ** exponent as the CPU computes it for complex results: a number exponent of
    0 or 1 gives ones or a copy, 0.5, 2, 3, -0.5, -1 and -2 their square root, product and
    reciprocal forms; otherwise exp(exponent * log(self)) with both as complex numbers
    (std::pow's cpow: so 0 ** 0 is nan, 0 ** 2.5 is 0 and 0 ** -1.5 is inf + nan i)."""
    if not isinstance(self, torch.Tensor) and not isinstance(exponent, torch.Tensor):
        return NotImplemented
    cd = _result_dtype(self, exponent)
    if not cd.is_complex:
        return NotImplemented
    rd = _real_of(cd)
    like = _device_of(self, exponent)
    if isinstance(self, torch.Tensor) and isinstance(exponent, numbers.Number):
        z = self if self.dtype == cd else self.to(cd)
        e = complex(exponent)
        if e == 0:
            return torch.ones_like(z)
        if e == 1:
            return z.clone()
        if e.imag == 0 and e.real in _POW_SCALAR:
            return _POW_SCALAR[e.real](z)
    if isinstance(self, torch.Tensor):
        zr, zi = _parts(self, rd)
        lr, li = torch.log(torch.hypot(zr, zi)) if zi is not None else torch.log(zr.abs()), \
            torch.atan2(zi, zr) if zi is not None else torch.atan2(torch.zeros_like(zr), zr)
    else:
        lg = cmath.log(complex(self)) if complex(self) != 0 else complex(-math.inf, 0.0)
        lr = torch.tensor(lg.real, dtype=rd, device=like.device)
        li = torch.tensor(lg.imag, dtype=rd, device=like.device)
    er, ei = _parts(exponent, rd)
    if ei is None:  # a real exponent is multiplied as a complex number: 0 * inf gives nan, as cpow's product
        ei = torch.zeros_like(er) if isinstance(er, torch.Tensor) else 0.0
    t = lambda v: v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=rd, device=like.device)  # noqa: E731
    wr, wi = _mul_c99(*torch.broadcast_tensors(t(er), t(ei), lr, li))
    return _join(*_exp(wr, wi), cd, like)


def _mul_c99(a, b, c, d):
    """(a + ib)(c + id) as C99's complex product (Annex G, glibc's __mulsc3), which cpow
    uses: the plain product, unless both parts are nan where an operand or a partial
    product is infinite; then infinities are boxed to +-1, nans to +-0, and the product
    is recomputed times infinity (so (2.5 + 0i)(inf + nan i) is inf + nan i, not nan)."""
    ac, bd, ad, bc = a * c, b * d, a * d, b * c
    x, y = ac - bd, ad + bc
    inf, isinf, isnan = math.inf, torch.isinf, torch.isnan

    def box(v):  # an infinity -> +-1, a finite value -> +-0
        return torch.copysign(isinf(v).to(v.dtype), v)

    def zero_nan(v, where):
        return torch.where(where & isnan(v), torch.copysign(torch.zeros_like(v), v), v)

    inf1, inf2 = isinf(a) | isinf(b), isinf(c) | isinf(d)
    a, b = torch.where(inf1, box(a), a), torch.where(inf1, box(b), b)
    c, d = zero_nan(c, inf1), zero_nan(d, inf1)
    c, d = torch.where(inf2, box(c), c), torch.where(inf2, box(d), d)
    a, b = zero_nan(a, inf2), zero_nan(b, inf2)
    over = ~(inf1 | inf2) & (isinf(ac) | isinf(bd) | isinf(ad) | isinf(bc))
    a, b, c, d = (zero_nan(v, over) for v in (a, b, c, d))
    redo = isnan(x) & isnan(y) & (inf1 | inf2 | over)
    return (torch.where(redo, inf * (a * c - b * d), x), torch.where(redo, inf * (a * d + b * c), y))


# ---- data movement --------------------------------------------------------------------


def _common_complex(tensors):
    cd = tensors[0].dtype
    for t in tensors[1:]:
        cd = torch.promote_types(cd, t.dtype)
    return cd


def where(condition, self, other):
    s = _binary_setup(self, other)
    if s is None:
        return NotImplemented
    cd, rd, (ar, ai), (br, bi) = s
    dev = _device_of(condition, self, other)
    c = condition
    re = torch.where(c, ar, br)
    im = torch.where(c, ai if ai is not None else 0.0, bi if bi is not None else 0.0)
    return _join(re, im, cd, dev)


def cat(tensors, dim=0):
    ts = [t for t in tensors]
    if not any(t.is_complex() for t in ts):
        return NotImplemented
    cd = _common_complex(ts)
    ref = next(t for t in ts if t.dim() > 0 or t.numel() > 0)
    nd = max(t.dim() for t in ts)
    d = dim % nd if nd else 0
    views = []
    for t in ts:
        if t.dim() == 1 and t.numel() == 0 and nd > 1:
            continue  # legacy empty tensors are skipped by cat
        views.append(_rv(t.to(cd)))
    return torch.view_as_complex(torch.cat(views, d).contiguous()) if views else ref.new_empty((0,), dtype=cd)


def stack(tensors, dim=0):
    ts = list(tensors)
    if not any(t.is_complex() for t in ts):
        return NotImplemented
    cd = _common_complex(ts)
    d = dim % (ts[0].dim() + 1)
    return torch.view_as_complex(torch.stack([_rv(t.to(cd)) for t in ts], d).contiguous())


def index(self, indices):
    if not self.is_complex():
        return NotImplemented
    v = _rv(self)
    return torch.view_as_complex(aten.index.Tensor(v, list(indices)).contiguous())


def index_put(self, indices, values, accumulate=False):
    if not self.is_complex():
        return NotImplemented
    out = self.clone()
    v = torch.view_as_real(out)
    vals = _rv(values.to(self.dtype))
    aten.index_put_.default(v, list(indices), vals, accumulate)
    return out


def flip(self, dims):
    if not self.is_complex():
        return NotImplemented
    return torch.view_as_complex(_rv(self).flip(_dims(dims, self.dim())).contiguous())


def roll(self, shifts, dims=()):
    if not self.is_complex():
        return NotImplemented
    if not dims:
        return torch.view_as_complex(_rv(self.flatten()).roll(shifts, 0).contiguous()).view(self.shape)
    return torch.view_as_complex(_rv(self).roll(shifts, _dims(dims, self.dim())).contiguous())


def gather(self, dim, index, *, sparse_grad=False):
    if not self.is_complex():
        return NotImplemented
    d = dim % max(self.dim(), 1)
    v = _rv(self)
    idx = index.unsqueeze(-1).expand(*index.shape, 2)
    return torch.view_as_complex(torch.gather(v, d, idx).contiguous())


def masked_fill(self, mask, value):
    if not self.is_complex():
        return NotImplemented
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        return NotImplemented
    re, im = _parts(value, _real_of(self.dtype))
    v = _rv(self)
    m = mask.unsqueeze(-1) if mask.dim() else mask
    fill = torch.stack((torch.as_tensor(re, dtype=v.dtype, device=v.device),
                        torch.as_tensor(0.0 if im is None else im, dtype=v.dtype, device=v.device)))
    return torch.view_as_complex(torch.where(m, fill, v).contiguous())


# ---- matrix products ------------------------------------------------------------------


def _product(op, a, b):
    cd = torch.promote_types(a.dtype, b.dtype)
    if not cd.is_complex:
        return NotImplemented
    rd = _real_of(cd)
    re, im = _mul_parts(*_parts(a, rd), *_parts(b, rd), op=op)
    return _join(re, im, cd, a)


def mm(self, mat2):
    return _product(torch.mm, self, mat2)


def bmm(self, mat2):
    return _product(torch.bmm, self, mat2)


def dot(self, tensor):
    return _product(torch.dot, self, tensor)


def mv(self, vec):
    return _product(torch.mv, self, vec)


# ---- FFTs (runtime/kernels/fft.c: tpu::fft_* on real views) ------------------------------


def _fft_dims(dim, ndim):
    return [d % ndim for d in dim]


def _fft_ok(dtype) -> bool:
    """The kernels take float32/float64 data (complex64/complex128); other
    dtypes go to the CPU, which raises its own error for them."""
    return dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _fft_c2c(self, dim, normalization, forward):
    if not _fft_ok(self.dtype):
        return NotImplemented
    return torch.view_as_complex(torch.ops.tpu.fft_c2c(_rv(self), _fft_dims(dim, self.dim()), normalization, forward))


def _fft_r2c(self, dim, normalization, onesided):
    if not _fft_ok(self.dtype) or self.is_complex():
        return NotImplemented
    return torch.view_as_complex(torch.ops.tpu.fft_r2c(self, _fft_dims(dim, self.dim()), normalization, onesided))


def _fft_c2r(self, dim, normalization, last_dim_size):
    if not _fft_ok(self.dtype):
        return NotImplemented
    return torch.ops.tpu.fft_c2r(_rv(self), _fft_dims(dim, self.dim()), normalization, last_dim_size)


# name -> rule, for the functional op; in-place overloads (name_) are derived.
RULES = {
    "add": add, "sub": sub, "rsub": rsub, "mul": mul, "div": div, "true_divide": true_divide,
    "neg": neg, "conj_physical": conj_physical, "resolve_conj": resolve_conj, "abs": abs_, "angle": angle,
    "sgn": sgn, "exp": exp, "log": log, "reciprocal": reciprocal, "sin": sin, "cos": cos, "sinh": sinh,
    "cosh": cosh, "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "eq": eq, "ne": ne,
    "complex": complex_, "polar": polar,
    "sum": sum_, "mean": mean, "where": where, "cat": cat, "stack": stack, "index": index,
    "index_put": index_put, "flip": flip, "roll": roll, "gather": gather, "masked_fill": masked_fill,
    "mm": mm, "bmm": bmm, "dot": dot, "mv": mv, "prod": prod, "pow": pow_,
}
# Rules that are in place by nature (they write self and return it).
INPLACE = {"fill_": fill_, "zero_": zero_, "normal_": normal_, "uniform_": uniform_}
RULES.update(_fft_c2c=_fft_c2c, _fft_r2c=_fft_r2c, _fft_c2r=_fft_c2r)
RULES.update(var=var, std=std, var_mean=var_mean, std_mean=std_mean, sqrt=sqrt, rsqrt=rsqrt, tanh=tanh, tan=tan,
             log2=_log_base(2), log10=_log_base(10), asin=asin, acos=acos, acosh=acosh, asinh=asinh,
             atan=atan, atanh=atanh, log1p=log1p)


# Ops that make complex results from real inputs: their rules are asked
# even when no argument is complex.
PRODUCERS = {"complex", "polar", "_fft_r2c"}


def rule(op):
    """The rule for an ATen OpOverload, or None."""
    name = op._schema.name.partition("::")[2]
    fn = INPLACE.get(name)
    if fn is not None:
        return fn
    if name.endswith("_") and name[:-1] in RULES:
        functional = RULES[name[:-1]]

        def inplace(self, *args, **kwargs):
            res = functional(self, *args, **kwargs)
            if res is NotImplemented:
                return res
            if not torch.can_cast(res.dtype, self.dtype):
                raise RuntimeError(f"result type {_type_name(res.dtype)} can't be cast to the desired output "
                                   f"type {_type_name(self.dtype)}")
            return self.copy_(res)
        return inplace
    return RULES.get(name)


def _type_name(dtype) -> str:
    return torch.empty((), dtype=dtype, device="meta").type().rsplit(".", 1)[-1].replace("Tensor", "")

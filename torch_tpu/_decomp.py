"""Eager decompositions for drivers without host kernels (pjrt).

When the driver has no lowering of an ATen call (its op, dtypes or
arguments), the bridge (csrc/aten/decompose.cpp) calls `run` before taking
PyTorch's CPU fallback: if PyTorch's decomposition table (torch._decomp, the
table torch.compile's graphs are decomposed with) has an entry for the op, it
runs on the tpu tensors, so each op it is made of reaches the driver: its
lowering, a further decomposition, or the CPU fallback for that smaller op.
On the host driver only ops outside its kernel table come here (torch.equal,
whose Python bool no kernel returns, for one), and calls with complex data on
every driver: those take the rules of torch_tpu/_complex.py first.

`decomposition_report()` counts the decomposed calls per op.
"""
from __future__ import annotations

import collections
import math

import torch

from torch_tpu import _complex

_table = None
_counts: collections.Counter = collections.Counter()


# Ops whose entry in torch._decomp is a reference implementation over prims
# that, run eagerly, calls the same ATen op again: written here in ops the
# drivers lower. Half-precision inputs accumulate in float32, as PyTorch's
# CPU kernels do.
def _var(x, dim=None, *, correction=None, keepdim=False):
    if x.dtype.is_complex or not x.dtype.is_floating_point:
        raise NotImplementedError(f"aten::var.correction: dtype {x.dtype} is not supported")
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else [d % max(x.dim(), 1) for d in dim]
    n = 1
    for d in dims:
        n *= x.shape[d] if x.dim() else 1
    c = 1 if correction is None else correction
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    dev = xf - xf.mean(dims, keepdim=True)
    v = (dev * dev).sum(dims, keepdim=keepdim) / max(n - c, 0)
    return v.to(x.dtype)


def _std(x, dim=None, *, correction=None, keepdim=False):
    return _var(x, dim, correction=correction, keepdim=keepdim).sqrt()


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    dims = None if dim is None or len(dim) == 0 else dim
    m = x.mean(dims if dims is not None else list(range(x.dim())), keepdim=keepdim)
    return _var(x, dim, correction=correction, keepdim=keepdim), m


def _signbit(x):
    if x.dtype.is_floating_point:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
        return x.view(bits) < 0
    return x < 0


def _equal(a, b):
    """torch.equal as the CPU answers it: False for different sizes, else
    whether every element compares equal after type promotion (NaN never
    does, not even against itself; empty tensors are equal)."""
    if a.device != b.device:
        raise RuntimeError(f"Expected both tensors on the same device, got {a.device} and {b.device}")
    if a.shape != b.shape:
        return False
    return bool((a == b).all().item())


def _scalar_pow(base: float, exponent):
    """base ** exponent (a float64 tensor) in ops every driver lowers."""
    if base <= 0:
        return torch.pow(base, exponent)
    return torch.exp(exponent * math.log(base))


def _matrix_exp(a):
    """linalg_matrix_exp by scaling and squaring: each matrix scaled by 2^-s to a
    1-norm <= 1, the degree-18 Taylor polynomial by Horner's rule (remainder below
    1/19! = 8e-18), then squared s times; float16/bfloat16 accumulate in float32."""
    if a.dim() < 2 or a.size(-1) != a.size(-2):
        raise RuntimeError(f"linalg.matrix_exp: Expected a square matrix or batch of square matrices, "
                           f"got a tensor of shape {tuple(a.shape)}")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise RuntimeError(f"linalg.matrix_exp: Expected a floating point or complex tensor, got {a.dtype}")
    n = a.size(-1)
    if n == 0 or a.numel() == 0:
        return a.clone()
    x = a.float() if a.dtype in (torch.float16, torch.bfloat16) else a
    norm = x.abs().sum(-2).amax(-1)
    finite = torch.isfinite(norm)
    s = torch.where(finite & (norm > 1), torch.ceil(torch.log2(norm.clamp(min=1))), torch.zeros_like(norm))
    squarings = int(s.max().item())
    x = x * torch.exp2(-s)[..., None, None]
    eye = torch.eye(n, dtype=x.dtype, device=x.device).expand_as(x)
    p = eye
    for k in range(18, 0, -1):
        p = eye + torch.matmul(x, p) / k
    for k in range(squarings):
        p = torch.where((s > k)[..., None, None], torch.matmul(p, p), p)
    return p.to(a.dtype)


def _rrelu_noise_and_output(x, lower, upper, training, generator):
    if not training:  # the mean slope; the noise is not touched
        return None, torch.where(x >= 0, x, x * ((lower + upper) / 2))
    r = torch.empty_like(x).uniform_(lower, upper, generator=generator)
    neg = x <= 0  # as the CPU's kernel: r where input <= 0, else 1
    noise = torch.where(neg, r, torch.ones_like(r))
    return noise, x * noise


def _rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """rrelu_with_noise: in training each element <= 0 is scaled by a slope drawn
    from U(lower, upper) on the device's generator and `noise` records the slopes
    (1 elsewhere), which the backward multiplies the gradient by."""
    new_noise, out = _rrelu_noise_and_output(x, lower, upper, training, generator)
    if new_noise is not None:
        noise.copy_(new_noise)
    return out


def _rrelu_with_noise_(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    return x.copy_(_rrelu_with_noise(x, noise, lower, upper, training, generator))


def _rrelu_with_noise_functional(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    new_noise, out = _rrelu_noise_and_output(x, lower, upper, training, generator)
    return out, (noise.clone() if new_noise is None else new_noise)


def _fractional_starts(u, size, out, k):
    """The CPU's window starts for one spatial dim (ATen's generate_intervals):
    alpha = (size - k) / (out - 1) and start_i = int((i + u) * alpha) - int(u * alpha),
    in the samples' dtype, the last window ending at the edge. u: [N, C] -> [N, C, out]."""
    last = torch.full((*u.shape, 1), size - k, dtype=torch.int64, device=u.device)
    if out <= 1:
        return last[..., :out]
    alpha = torch.tensor(size - k, dtype=u.dtype, device=u.device) / (out - 1)
    i = torch.arange(out - 1, dtype=u.dtype, device=u.device)
    starts = ((i + u.unsqueeze(-1)) * alpha).to(torch.int64) - (u * alpha).to(torch.int64).unsqueeze(-1)
    return torch.cat([starts, last], -1)


def _fractional_max_pool(name, x, kernel_size, output_size, random_samples):
    """fractional_max_pool2d/3d: windows of kernel_size at the CPU's pseudo-random
    starts, the first maximum of each (a NaN wins, the last one as the CPU's
    loop keeps it); indices flat within the input plane."""
    nd = len(kernel_size)
    if x.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input, "
                           f"got {x.dim()}D")
    batched = x.dim() == nd + 2
    xb = x if batched else x.unsqueeze(0)
    N, C, sizes = xb.shape[0], xb.shape[1], xb.shape[2:]
    what = ("time", "height", "width")[3 - nd:]
    for d in range(nd):
        # the CPU's bounds: output + kernel - 1 <= input in 2-D, < input in 3-D
        span = output_size[d] + kernel_size[d] - 1
        if span > sizes[d] or (nd == 3 and span == sizes[d]):
            raise RuntimeError(f"{name}{'_out' if nd == 3 else ''}(): pool {what[d]} {kernel_size[d]} too large "
                               f"relative to input {what[d]} {sizes[d]}")
    if xb.numel() == 0 or any(o == 0 for o in output_size):
        empty = xb.new_empty((N, C, *output_size))
        idx = torch.zeros((N, C, *output_size), dtype=torch.int64, device=x.device)
        return (empty, idx) if batched else (empty.squeeze(0), idx.squeeze(0))
    u = random_samples.to(xb.dtype)
    flat = None  # [N, C, o0, ..., k0, ...] flat input positions
    stride = 1
    for d in reversed(range(nd)):
        # the samples per plane: (width, height) in 2-D, (time, height, width) in 3-D, as the CPU reads them
        sample = u[..., 1 - d] if nd == 2 else u[..., d]
        starts = _fractional_starts(sample, sizes[d], output_size[d], kernel_size[d])
        pos = starts.unsqueeze(-1) + torch.arange(kernel_size[d], device=x.device)  # [N, C, o_d, k_d]
        shape = [N, C] + [1] * (2 * nd)
        shape[2 + d], shape[2 + nd + d] = output_size[d], kernel_size[d]
        term = pos.reshape(shape) * stride
        flat = term if flat is None else flat + term
        stride *= sizes[d]
    K = 1
    for k in kernel_size:
        K *= k
    flat = flat.reshape(N, C, -1, K)
    vals = torch.gather(xb.reshape(N, C, -1), 2, flat.reshape(N, C, -1)).reshape(N, C, -1, K)
    best = vals.argmax(-1, keepdim=True)
    nan = vals.isnan()
    last_nan = (K - 1) - nan.flip(-1).to(torch.uint8).argmax(-1, keepdim=True)
    best = torch.where(nan.any(-1, keepdim=True), last_nan, best)
    out = torch.gather(vals, -1, best).reshape(N, C, *output_size)
    idx = torch.gather(flat, -1, best).reshape(N, C, *output_size)
    return (out, idx) if batched else (out.squeeze(0), idx.squeeze(0))


def _fractional_max_pool2d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool("fractional_max_pool2d", x, kernel_size, output_size, random_samples)


def _fractional_max_pool3d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool("fractional_max_pool3d", x, kernel_size, output_size, random_samples)


def _fractional_max_pool_backward(grad_output, x, kernel_size, output_size, indices):
    """Each output's gradient added at its input position (the CPU's += loop)."""
    nd = len(kernel_size)
    lead = x.shape[:x.dim() - nd]
    g = torch.zeros(x.shape, dtype=grad_output.dtype, device=x.device)
    if g.numel() == 0:
        return g
    plane = g.shape[x.dim() - nd:].numel()
    g = g.reshape(*lead, plane)
    n_out = indices.shape[x.dim() - nd:].numel()
    g.scatter_add_(-1, indices.reshape(*lead, n_out), grad_output.reshape(*lead, n_out))
    return g.reshape(x.shape)


def _aa_weights(in_size, out_size, align_corners, scale, bicubic):
    """[out, in] float64 weights of antialiased upsampling along one dim, as
    ATen's separable AA kernels compute them: the filter widened by the
    downscaling factor, each row normalised to sum 1."""
    if align_corners:
        sc = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        sc = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    half = 2.0 if bicubic else 1.0  # interp_size / 2
    support = half * sc if sc >= 1.0 else half
    inv = 1.0 / sc if sc >= 1.0 else 1.0
    i = torch.arange(out_size, dtype=torch.float64)
    center = sc * (i + 0.5)
    xmin = (center - support + 0.5).trunc().clamp(min=0)
    xmax = (center + support + 0.5).trunc().clamp(max=in_size)
    j = torch.arange(in_size, dtype=torch.float64)
    x = ((j[None, :] - center[:, None] + 0.5) * inv).abs()
    if bicubic:
        a = -0.5
        w = torch.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                        torch.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, torch.zeros_like(x)))
    else:
        w = (1 - x).clamp(min=0)
    w = torch.where((j[None, :] >= xmin[:, None]) & (j[None, :] < xmax[:, None]), w, torch.zeros_like(w))
    total = w.sum(1, keepdim=True)
    return torch.where(total != 0, w / torch.where(total != 0, total, torch.ones_like(total)), w)


def _upsample_aa(bicubic):
    def upsample(x, output_size, align_corners, scales_h=None, scales_w=None):
        """_upsample_bilinear2d_aa / _upsample_bicubic2d_aa: the weights along
        height and width applied as two products on the device."""
        if x.dim() != 4:
            raise RuntimeError(f"Expected 4D input for antialiased upsampling, got {x.dim()}D")
        H, W = x.shape[-2:]
        oh, ow = output_size
        wh = _aa_weights(H, oh, align_corners, scales_h, bicubic).to(device=x.device, dtype=x.dtype)
        ww = _aa_weights(W, ow, align_corners, scales_w, bicubic).to(device=x.device, dtype=x.dtype)
        return torch.matmul(torch.matmul(wh, x), ww.t())

    return upsample


# Backwards of upsampling ops, which are linear in their input: the gradient is
# the vector-Jacobian product of the forward op's decomposition (torch.func.vjp
# runs it on device ops), so one rule serves every mode and dimension. The
# backward takes (grad_output, output_size, input_size, *rest); the forward
# (input, output_size, *rest).
_LINEAR_BACKWARDS = (
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
)


def _linear_backward(forward):
    def backward(grad_output, output_size, input_size, *rest, **kwargs):
        fwd = _table.get(forward)
        if fwd is None:
            return NotImplemented
        x0 = torch.zeros(input_size, dtype=grad_output.dtype, device=grad_output.device)
        _, vjp = torch.func.vjp(lambda x: fwd(x, output_size, *rest, **kwargs), x0)
        return vjp(grad_output)[0]

    return backward


def _fused_adam(adamw, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """torch._fused_adam(w)_ as the host kernel computes it (kernels/optim.c):
    per parameter in float32 (float64 for float64), the bias corrections in
    float64, every state tensor written once; found_inf == 1 leaves all
    unchanged (on the device: no read back to the host). The bridge has run
    the kernel's check() on the arguments before (OpPlan::checked)."""
    skip = None if found_inf is None else found_inf.reshape(()) == 1
    for i, p in enumerate(params):
        if p.numel() == 0:
            continue
        f = torch.float64 if p.dtype == torch.float64 else torch.float32
        p0, m0, v0 = p.to(f), exp_avgs[i].to(f), exp_avg_sqs[i].to(f)
        g = grads[i].to(f)
        if grad_scale is not None:
            g = g * (1.0 / grad_scale.to(torch.float64)).to(f)
        if maximize:
            g = -g
        if not adamw and weight_decay != 0:
            g = g + weight_decay * p0
        m = m0 + (1 - beta1) * (g - m0)
        v = beta2 * v0 + (1 - beta2) * g * g
        d = v
        if amsgrad:
            vmax = torch.maximum(max_exp_avg_sqs[i].to(f), v)
            d = vmax
        step = state_steps[i].reshape(()).to(torch.float64)
        step_size = (lr / (1 - _scalar_pow(beta1, step))).to(f)
        bc2_sqrt = (1 - _scalar_pow(beta2, step)).sqrt().to(f)
        keep = 1 - lr * weight_decay if adamw else 1
        new_p = p0 * keep - step_size * m / (d.sqrt() / bc2_sqrt + eps)
        outs = [(p, new_p, p0), (exp_avgs[i], m, m0), (exp_avg_sqs[i], v, v0)]
        if amsgrad:
            outs.append((max_exp_avg_sqs[i], vmax, None))
        for dst, val, old in outs:
            if skip is not None:
                val = torch.where(skip, dst.to(f) if old is None else old, val)
            dst.copy_(val)


def _fused_adam_(*args, **kwargs):
    return _fused_adam(False, *args, **kwargs)


def _fused_adamw_(*args, **kwargs):
    return _fused_adam(True, *args, **kwargs)


_LOW = (torch.bfloat16, torch.float16)


def _linalg_cross(a, b, dim=-1):
    """linalg.cross as the CPU's kernel computes it: in the inputs' own dtype,
    each product and the difference rounded to it (c10::BFloat16 / c10::Half
    arithmetic). The reference (torch._refs.linalg.cross) upcasts bfloat16 and
    float16 to float32 and rounds once, a different answer in a third of the
    elements."""
    from torch._refs.linalg import cross
    if not (a.dtype in _LOW or b.dtype in _LOW):
        return cross(a, b, dim)
    cross(a.to("meta"), b.to("meta"), dim)  # the reference's argument checks
    dt = torch.result_type(a, b)
    a, b = torch.broadcast_tensors(a.to(dt), b.to(dt))
    d = dim % a.dim()
    i1 = torch.tensor([1, 2, 0], device=a.device)
    i2 = torch.tensor([2, 0, 1], device=a.device)
    return a.index_select(d, i1) * b.index_select(d, i2) - a.index_select(d, i2) * b.index_select(d, i1)


def _native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """native_group_norm in bfloat16/float16: the reference's
    CPU branch (torch._refs.native_group_norm takes it only for device "cpu"),
    which is the CPU kernel's arithmetic: statistics in float32, then
    y = x * (rstd * weight) + (bias - mean * rstd * weight) in float32, rounded
    once. The other branch, ((x - mean) * rstd) * weight + bias, rounds
    differently in a few percent of the elements."""
    from torch._refs import native_group_norm
    if input.dtype not in _LOW:
        return torch.ops.aten.native_group_norm.default._op_dk(
            torch._C.DispatchKey.CompositeExplicitAutograd, input, weight, bias, N, C, HxW, group, eps)
    meta = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in (input, weight, bias)]
    native_group_norm(*meta, N, C, HxW, group, eps)  # the reference's argument checks
    from torch._prims_common import suggest_memory_format
    fmt = suggest_memory_format(input)
    xf = input.contiguous(memory_format=fmt).float()
    xr = xf.reshape(N, group, C // group, HxW)
    var, mean = torch.var_mean(xr, dim=[2, 3], unbiased=False, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    w = rstd.expand(N, group, C // group, 1)
    if weight is not None:
        w = w * weight.contiguous().reshape(1, group, C // group, 1)
    b = -mean * w
    if bias is not None:
        b = b + bias.contiguous().reshape(1, group, C // group, 1)
    shape = [N, C] + [1] * (input.dim() - 2)
    out = xf * w.reshape(shape) + b.reshape(shape)
    out = out.to(input.dtype).contiguous(memory_format=fmt)
    return out, mean.reshape(N, group).to(input.dtype), rstd.reshape(N, group).to(input.dtype)


def _native_dropout_backward(grad_output, mask, scale):
    """The CPU's grad * mask * scale (the scale multiplied in float opmath). The
    reference's grad * (mask.type_as(grad) * scale) rounds the scale to
    bfloat16/float16 first: a different answer in a fifth of the elements."""
    return grad_output * mask * scale


_lib = None


def install():
    """Registers the PrivateUse1 kernels of the ops whose only other kernel on
    the tpu is ATen's CompositeExplicitAutograd one, where that one rounds
    differently from the CPU kernel: native_group_norm (math_group_norm goes
    through batch_norm and multiplies by the weight in bfloat16/float16)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("native_group_norm", _native_group_norm, "PrivateUse1")
    _lib = lib


def _geometric_(self, p, *, generator=None):
    """geometric_ of an integer tensor, as the CPU allows: ceil(log(u) / log1p(-p))
    for u uniform in (0, 1], drawn in float64, at least 1. The reference draws
    with uniform_ in the tensor's own dtype, which no driver has for integers."""
    from torch._refs import geometric_
    if self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        return geometric_(self, p, generator=generator)
    if not (0 < p < 1):
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = 1 - torch.empty(self.shape, dtype=torch.float64, device=self.device).uniform_(generator=generator)
    v = torch.ceil(torch.log(u) / math.log1p(-p)).clamp_min(1)
    return self.copy_(v)


def _hash_tensor(x, dim=(), *, keepdim=False, mode=0, out=None):
    """hash_tensor (mode 0, xor_sum): the elements widened to 64 bits (floating
    types to float64 and their bits taken, integers and bool sign-extended to
    int64), XOR-reduced over `dim` (every dim when empty) as uint64. The XOR
    runs as halving steps of bitwise_xor on int64, viewed as uint64 at the end."""
    if mode != 0:
        raise RuntimeError(f"hash_tensor: Unknown hash_tensor mode: {mode}")
    if x.dtype.is_complex or x.dtype in (torch.uint16, torch.uint32, torch.uint64):
        raise NotImplementedError(f"hash_tensor: not implemented for '{_type_name(x.dtype)}'")
    if out is not None and out.dtype != torch.uint64:
        raise RuntimeError(f"hash_tensor: Expected result to be of dtype uint64, but got {_type_name(out.dtype)}")
    nd = max(x.dim(), 1)
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not -nd <= d < nd:
            raise IndexError(f"hash_tensor: Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                             f"but got {d})")
    dims = [d % nd for d in dims]
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"hash_tensor: dim {dims[0]} appears multiple times in the list of dims")
    if not dims:
        if x.numel() == 0:
            raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        dims = list(range(x.dim()))
    for d in dims:
        if x.dim() and x.shape[d] == 0:
            raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    if x.dtype.is_floating_point:
        bits = x.to(torch.float64).view(torch.int64)
    else:
        bits = x.to(torch.int64)
    keep = [d for d in range(x.dim()) if d not in dims]
    kept_shape = [x.shape[d] for d in keep]
    h = bits.permute(keep + [d for d in range(x.dim()) if d in dims]).reshape(kept_shape + [-1])
    while h.shape[-1] > 1:
        k = h.shape[-1]
        half = h[..., : k // 2] ^ h[..., k // 2: 2 * (k // 2)]
        h = torch.cat([half[..., :1] ^ h[..., -1:], half[..., 1:]], -1) if k % 2 else half
    h = h.reshape(kept_shape)
    if keepdim:
        h = h.reshape([1 if d in dims else x.shape[d] for d in range(x.dim())])
    res = h.contiguous().view(torch.uint64)
    if out is None:
        return res
    if out.shape != res.shape:
        out.resize_(res.shape)
    out.view(torch.int64).copy_(res.view(torch.int64))
    return out


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _linalg_lstsq(a, b, rcond=None, *, driver=None):
    """linalg_lstsq by the SVD of A for every driver: the minimum-norm solution
    over the singular values above rcond * s_max (LAPACK's rule for gelss/gelsd,
    and what gelsy's complete orthogonal factorisation yields), with each
    driver's outputs as the CPU returns them: rank for all but gels, singular
    values for gelss/gelsd, residuals (squared column norms of A x - B) when
    m > n, except gelsy, and for gelss/gelsd only when every matrix has rank n.
    Declined (CPU fallback) where the rank is not the SVD's to decide: gels of a
    numerically rank-deficient A or one with no columns, gelsy within a factor
    1000 of its threshold, gelss/gelsd within rounding of it, a negative rcond."""
    name = "torch.linalg.lstsq"
    if a.dim() < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if a.dtype.is_complex or b.dtype.is_complex:
        return NotImplemented
    if a.dtype not in (torch.float32, torch.float64) and a.dtype == b.dtype:
        raise RuntimeError(f"{name}: This function doesn't handle types other than float and double")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{name}: Expected input and other to have the same dtype, but got input's dtype "
                           f"{_type_name(a.dtype)} and other's dtype {_type_name(b.dtype)}")
    if not (a.dim() >= b.dim() and a.dim() - b.dim() <= 1):
        raise RuntimeError(f"{name}: input.dim() must be greater or equal to other.dim() and "
                           f"(input.dim() - other.dim()) <= 1")
    drv = "gelsy" if driver is None else driver
    if drv not in _LSTSQ_DRIVERS:
        raise RuntimeError(f"{name}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = b.dim() == 1 or (a.dim() - 1 == b.dim() and b.shape == a.shape[:-1])
    if vector:
        b = b.unsqueeze(-1)
    elif a.dim() != b.dim():
        raise RuntimeError(f"{name}: input.dim() must be greater or equal to other.dim() and "
                           f"(input.dim() - other.dim()) <= 1")
    m, n, k = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.shape[-2] != m:
        raise RuntimeError(f"{name}: input.size(-2) should match other.size(-2)")
    if (rcond is not None and rcond < 0) or (drv == "gels" and n == 0):
        return NotImplemented  # (gels of m x 0 matrices: the CPU's residuals are zeros, gelsd's |B|^2)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = a.expand(*batch, m, n)
    b = b.expand(*batch, m, k)
    dt = a.dtype
    eps = torch.finfo(dt).eps
    thresh = rcond if rcond is not None else eps * max(m, n)
    if a.numel() == 0:
        rank = torch.zeros(batch, dtype=torch.int64, device=a.device)
        x = torch.zeros(*batch, n, k, dtype=dt, device=a.device)
        sv = torch.zeros(*batch, min(m, n), dtype=dt, device=a.device)
    else:
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        smax = s[..., :1]
        rel = s / torch.where(smax > 0, smax, torch.ones_like(smax))
        keep = (s > thresh * smax) & (smax > 0)
        if drv == "gels":
            ambiguous = rel <= 1000 * eps * max(m, n)
        elif drv == "gelsy":
            ambiguous = (rel > thresh / 1000) & (rel < thresh * 1000)
        else:
            ambiguous = (rel - thresh).abs() <= 2 * eps
        if bool(ambiguous.any().item()):
            return NotImplemented
        rank = keep.sum(-1)
        inv = torch.where(keep, 1 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
        x = vh.mT @ (inv.unsqueeze(-1) * (u.mT @ b))
        sv = s
    full = m > n and drv != "gelsy"
    if full and drv in ("gelss", "gelsd"):
        full = bool((rank == n).all().item())
    empty = torch.empty(0, dtype=dt, device=a.device)
    residuals = (a @ x - b).square().sum(-2) if full else empty
    return (x.squeeze(-1) if vector else x, residuals,
            rank if drv != "gels" else torch.empty(0, dtype=torch.int64, device=a.device),
            sv if drv in ("gelss", "gelsd") else empty)


def _linalg_polar(a):
    """linalg_polar from the reduced SVD A = W S V^T: U = W V^T, H = V S V^T
    (the CPU kernel's construction). The meta kernel makes the argument checks."""
    torch.ops.aten.linalg_polar.default(a.to("meta"))
    if a.dtype.is_complex:
        return NotImplemented
    if a.dtype not in (torch.float32, torch.float64):
        raise NotImplementedError(f"linalg.polar: not implemented for '{_type_name(a.dtype)}'")
    n = a.shape[-1]
    if a.numel() == 0:
        return a.new_zeros(a.shape), a.new_zeros((*a.shape[:-2], n, n))
    w, s, vh = torch.linalg.svd(a, full_matrices=False)
    return (w @ vh).contiguous(), (vh.mT @ (s.unsqueeze(-1) * vh)).contiguous()


def _grid_taps(coord, size, mode, padding, align):
    """Taps of grid sampling along one spatial dim, as the CPU's grid_sampler
    kernels compute them: [(index, weight, in-bounds)] for a coordinate in
    [-1, 1] (any shape), in the coordinate's dtype. mode 0 bilinear, 1 nearest,
    2 bicubic; padding 0 zeros, 1 border, 2 reflection."""
    def bound(c):  # compute_coordinates: padding applied to a source coordinate
        if padding == 1:
            c = torch.where(c.isnan(), torch.full_like(c, size - 1), c.clamp(0, size - 1))
        elif padding == 2:
            lo, hi = (0.0, 2.0 * (size - 1)) if align else (-1.0, 2.0 * size - 1)
            if lo == hi:
                c = torch.zeros_like(c)
            else:
                mn, span = lo / 2, (hi - lo) / 2
                d = (c - mn).abs()
                extra = torch.fmod(d, span)
                flips = torch.floor(d / span)
                c = torch.where(torch.fmod(flips, 2) == 0, extra + mn, span - extra + mn)
            c = torch.where(c.isnan(), torch.full_like(c, size - 1), c.clamp(0, size - 1))
        # safe_downgrade_to_int_range: NaN, infinities and huge values fall out of bounds
        return torch.where(c.isfinite() & (c.abs() < 2.0 ** 31 - 1), c, torch.full_like(c, -100.0))

    if align:
        c = (coord + 1) / 2 * (size - 1)
    else:
        c = ((coord + 1) * size - 1) / 2
    if mode != 2:
        c = bound(c)
    if mode == 1:
        starts, weights = [torch.round(c)], [None]
    elif mode == 0:
        f = torch.floor(c)
        starts, weights = [f, f + 1], [(f + 1) - c, c - f]
    else:
        f = torch.floor(c)
        t = c - f
        A = -0.75  # the cubic convolution coefficients (upsample_bicubic2d's)
        def near(x):  # |x| <= 1
            return ((A + 2) * x - (A + 3)) * x * x + 1

        def far(x):  # 1 < |x| < 2
            return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
        starts = [bound(f + (i - 1)) for i in range(4)]
        weights = [far(t + 1), near(t), near(1 - t), far((1 - t) + 1)]
    taps = []
    for s, w in zip(starts, weights):
        ok = (s >= 0) & (s <= size - 1)
        idx = torch.where(ok, s, torch.zeros_like(s)).to(torch.int64)
        taps.append((idx, w, ok))
    return taps


def _grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_3d: for each output point, the taps along depth, height and
    width (1, 2 or 4 each for nearest, trilinear, tricubic), their values
    gathered from the flattened volume and summed with the product weights in
    the CPU's order (depth outermost, width innermost); taps out of bounds add
    nothing. In the input's dtype, each step rounded to it, as the CPU (tricubic
    of bfloat16/float16: in float32, rounded once, as the CPU)."""
    torch.ops.aten.grid_sampler_3d.default(x.to("meta"), grid.to("meta"), interpolation_mode, padding_mode,
                                           align_corners)
    if interpolation_mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise RuntimeError(f"grid_sampler_3d: interpolation_mode {interpolation_mode} or padding_mode "
                           f"{padding_mode} is not one of 0, 1, 2")
    if x.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler_3d: expected scalar type {_type_name(x.dtype)} but found "
                           f"{_type_name(grid.dtype)}")
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"grid_sampler_3d: not implemented for '{_type_name(x.dtype)}'")
    if interpolation_mode == 2 and x.dtype in _LOW:  # the CPU's tricubic: in float32, rounded once
        return _grid_sampler_3d(x.float(), grid.float(), 2, padding_mode, align_corners).to(x.dtype)
    N, C, D, H, W = x.shape
    out_sp = grid.shape[1:4]
    P = out_sp.numel()
    if N * C * P == 0:
        return x.new_zeros((N, C, *out_sp))
    g = grid.reshape(N, P, 3)
    tz = _grid_taps(g[..., 2], D, interpolation_mode, padding_mode, align_corners)
    ty = _grid_taps(g[..., 1], H, interpolation_mode, padding_mode, align_corners)
    tx = _grid_taps(g[..., 0], W, interpolation_mode, padding_mode, align_corners)
    flat = x.reshape(N, C, D * H * W)

    def tap(iz, okz, iy, oky, ix, okx, w):  # (value, weight, in bounds) of one tap
        v = torch.gather(flat, 2, ((iz * H + iy) * W + ix).unsqueeze(1).expand(N, C, P))
        return v, w, (okx & oky & okz).unsqueeze(1)

    def wsum(terms):  # sum of value * weight, out-of-bounds terms adding nothing
        out = None
        for v, w, ok in terms:
            if w is not None:
                v = v * w.unsqueeze(1)
            if ok is not None:
                v = torch.where(ok, v, torch.zeros_like(v))
            out = v if out is None else out + v
        return out

    if interpolation_mode == 2:  # tricubic: along width, then height, then depth
        out = wsum([(wsum([(wsum([tap(iz, okz, iy, oky, ix, okx, wx) for ix, wx, okx in tx]), wy, None)
                           for iy, wy, oky in ty]), wz, None) for iz, wz, okz in tz])
    else:  # one sum with the product weights, as the CPU's trilinear kernel
        out = wsum([tap(iz, okz, iy, oky, ix, okx, None if wx is None else wx * wy * wz)
                    for iz, wz, okz in tz for iy, wy, oky in ty for ix, wx, okx in tx])
    return out.reshape(N, C, *out_sp)


def _grid_sampler_backward(forward):
    """grid_sampler_2d_backward / grid_sampler_3d_backward: the vector-Jacobian
    product of the forward's decomposition (torch._decomp's grid_sampler_2d,
    this module's _grid_sampler_3d; run on device ops) for the input and the
    grid; None for an input whose gradient output_mask omits, as the CPU."""
    def backward(grad_output, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        fwd = _table.get(forward)
        if fwd is None or grad_output.dtype not in (torch.float32, torch.float64):
            return NotImplemented
        _, vjp = torch.func.vjp(lambda i, g: fwd(i, g, interpolation_mode, padding_mode, align_corners), x, grid)
        gi, gg = vjp(grad_output)
        return (gi.contiguous() if output_mask[0] else None), gg.contiguous()

    return backward


def _hardshrink_backward(grad_output, x, lambd):
    """hardshrink_backward: 0 where -lambd <= input <= lambd, else the gradient;
    both tensors (broadcast) and lambd in their promoted dtype, as the CPU's
    kernel. A NaN input passes its gradient, as the CPU's scalar loop and the
    CUDA kernel (the CPU's vectorised loop, which runs on all but the tail of
    longer rows, gives 0 there: which one a NaN gets depends on its position)."""
    dt = torch.result_type(grad_output, x)
    if not dt.is_floating_point:
        raise NotImplementedError(f"hardshrink_backward: not implemented for '{_type_name(dt)}'")
    g, s = grad_output.to(dt), x.to(dt)
    lam = torch.full((), lambd, dtype=dt, device=s.device)
    inside = (s >= -lam) & (s <= lam)
    return torch.where(inside, torch.zeros((), dtype=dt, device=s.device), g)


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """_efficientzerotensor: a tensor of zeros, materialised (as the CPU fallback's
    copy to the device was). Its out= overload is ATen's composite one, which
    calls this with the out= tensor's dtype and device."""
    torch.ops.aten._efficientzerotensor.default(size, dtype=dtype, device="meta")  # the CPU's size checks
    if layout not in (None, torch.strided):
        raise RuntimeError(f"_efficientzerotensor: layout {layout} is not supported on tpu")
    return torch.zeros(size, dtype=dtype, device=device)


_LOCAL = {
    torch.ops.aten.linalg_cross.default: _linalg_cross,
    torch.ops.aten.linalg_cross.out: _linalg_cross,
    torch.ops.aten.geometric_.default: _geometric_,
    torch.ops.aten.native_dropout_backward.default: _native_dropout_backward,
    torch.ops.aten.native_dropout_backward.out: _native_dropout_backward,
    torch.ops.aten._fused_adam_.default: _fused_adam_,
    torch.ops.aten._fused_adam_.tensor_lr: _fused_adam_,
    torch.ops.aten._fused_adamw_.default: _fused_adamw_,
    torch.ops.aten._fused_adamw_.tensor_lr: _fused_adamw_,
    torch.ops.aten.var.correction: _var,
    torch.ops.aten.std.correction: _std,
    torch.ops.aten.var_mean.correction: _var_mean,
    torch.ops.aten.signbit.default: _signbit,
    torch.ops.aten.equal.default: _equal,
    torch.ops.aten.linalg_matrix_exp.default: _matrix_exp,
    torch.ops.aten.rrelu_with_noise.default: _rrelu_with_noise,
    torch.ops.aten.rrelu_with_noise.out: _rrelu_with_noise,
    torch.ops.aten.rrelu_with_noise_.default: _rrelu_with_noise_,
    torch.ops.aten.rrelu_with_noise_functional.default: _rrelu_with_noise_functional,
    torch.ops.aten._upsample_bilinear2d_aa.default: _upsample_aa(False),
    torch.ops.aten._upsample_bilinear2d_aa.out: _upsample_aa(False),
    torch.ops.aten._upsample_bicubic2d_aa.default: _upsample_aa(True),
    torch.ops.aten._upsample_bicubic2d_aa.out: _upsample_aa(True),
    torch.ops.aten.fractional_max_pool2d.default: _fractional_max_pool2d,
    torch.ops.aten.fractional_max_pool2d.output: _fractional_max_pool2d,
    torch.ops.aten.fractional_max_pool3d.default: _fractional_max_pool3d,
    torch.ops.aten.fractional_max_pool3d.output: _fractional_max_pool3d,
    torch.ops.aten.fractional_max_pool2d_backward.default: _fractional_max_pool_backward,
    torch.ops.aten.fractional_max_pool2d_backward.grad_input: _fractional_max_pool_backward,
    torch.ops.aten.fractional_max_pool3d_backward.default: _fractional_max_pool_backward,
    torch.ops.aten.fractional_max_pool3d_backward.grad_input: _fractional_max_pool_backward,
    torch.ops.aten.hash_tensor.default: _hash_tensor,
    torch.ops.aten.hash_tensor.out: _hash_tensor,
    torch.ops.aten.linalg_lstsq.default: _linalg_lstsq,
    torch.ops.aten.linalg_lstsq.out: _linalg_lstsq,
    torch.ops.aten.linalg_polar.default: _linalg_polar,
    torch.ops.aten.linalg_polar.out: _linalg_polar,
    torch.ops.aten.grid_sampler_3d.default: _grid_sampler_3d,
    torch.ops.aten.grid_sampler_3d.out: _grid_sampler_3d,
    torch.ops.aten.grid_sampler_2d_backward.default: _grid_sampler_backward(torch.ops.aten.grid_sampler_2d.default),
    torch.ops.aten.grid_sampler_3d_backward.default: _grid_sampler_backward(torch.ops.aten.grid_sampler_3d.default),
    torch.ops.aten.hardshrink_backward.default: _hardshrink_backward,
    torch.ops.aten.hardshrink_backward.grad_input: _hardshrink_backward,
    torch.ops.aten._efficientzerotensor.default: _efficientzerotensor,
}

# Entries that take their op's out= tensors themselves (their out= rule is not
# the generic one run() applies: hash_tensor's out= must be uint64 exactly).
_OWN_OUT = {torch.ops.aten.hash_tensor.out}


# List ops (torch._foreach_*): ATen's own slow path (one call of the
# per-tensor op per list element, as its foreach_tensor_*_kernel_slow does;
# the tpu kernel registration hides that path), so each call reaches the
# driver. The list op's positional `value` of addcdiv/addcmul is keyword-only
# in the per-tensor op.
_FOREACH_KEYWORD = {"addcdiv": "value", "addcmul": "value"}


def _foreach(base: str):
    inplace = base.endswith("_")
    op_name = base[len("_foreach_"):].rstrip("_")
    per = getattr(torch.ops.aten, op_name)
    per_ = getattr(torch.ops.aten, op_name + "_", None) if inplace else None
    keyword = _FOREACH_KEYWORD.get(op_name)

    def run_foreach(*args, **kwargs):
        lists = [(j, len(a)) for j, a in enumerate(args) if isinstance(a, (list, tuple))]
        n = lists[0][1] if lists else 0
        for j, m in lists:
            if m != n:
                raise ValueError(f"aten::{base}: argument {j} has {m} elements, expected {n}")
        out = []
        for i in range(n):
            a = [x[i] if isinstance(x, (list, tuple)) else x for x in args]
            kw = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
            if keyword is not None and len(a) == 4:
                kw[keyword] = a.pop()
            try:
                if not inplace:
                    out.append(per(*a, **kw))
                elif per_ is not None:
                    per_(*a, **kw)
                else:  # no in-place per-tensor op (maximum_, minimum_)
                    a[0].copy_(per(*a, **kw))
            except (RuntimeError, ValueError, TypeError) as e:
                raise type(e)(f"aten::{base}: element {i}: {e}") from e
        return None if inplace else out

    return run_foreach


def _lookup(name: str, overload: str):
    global _table
    if _table is None:
        from torch._decomp import decomposition_table
        _table = {**decomposition_table, **_LOCAL}
        for fwd_name in _LINEAR_BACKWARDS:
            forward = getattr(torch.ops.aten, fwd_name).default
            bwd = getattr(torch.ops.aten, fwd_name + "_backward")
            for bwd_overload in ("default", "grad_input"):
                _table.setdefault(getattr(bwd, bwd_overload), _linear_backward(forward))
    ns, _, base = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), base)
        op = getattr(packet, overload or "default")
    except AttributeError:
        return None, None
    fn = _table.get(op)
    if fn is None and ns == "aten" and base.startswith("_foreach_"):
        try:
            fn = _table[op] = _foreach(base)
        except AttributeError:  # no per-tensor op of that name
            fn = None
    return op, fn


# Decompositions that do not give PyTorch's CPU answer for some inputs: those
# calls take the CPU fallback instead. {op name, or "name.overload" for one
# overload: predicate(args) -> True to decline}. Bilinear/bicubic upsampling of uint8 images: the CPU rounds its
# own fixed-point way (off by one in 16% of the pixels otherwise).
_DECLINE = {
    name: (lambda args: bool(args) and isinstance(args[0], torch.Tensor) and not args[0].dtype.is_floating_point)
    for name in ("aten::upsample_bilinear2d", "aten::upsample_bicubic2d", "aten::_upsample_bilinear2d_aa",
                 "aten::_upsample_bicubic2d_aa")
}
# Special functions with host kernels (kernels/special.c): their reference
# decompositions accept what the CPU rejects (erfcx in float16/bfloat16, a
# float result into an integer out=) and round float16 differently; always
# declined, so a driver without a lowering stages them through the host kernels.
_DECLINE.update({
    name: (lambda args: True)
    for name in ("aten::lgamma", "aten::digamma", "aten::polygamma", "aten::erfc", "aten::special_erfcx",
                 "aten::cosh", "aten::sinh", "aten::i0", "aten::special_i0e", "aten::special_i1",
                 "aten::special_i1e", "aten::igamma", "aten::igammac", "aten::special_zeta",
                 "aten::special_ndtri", "aten::frexp", "aten::special_spherical_bessel_j0",
                 "aten::special_bessel_j0", "aten::special_bessel_j1")
})
# (igamma/igammac of integers, zeta, ndtri, spherical_bessel_j0 and bessel_j0/j1 in float16/bfloat16,
# frexp's out= dtypes: the references accept all of them.)
# max_pool2d's backward in bfloat16/float16: where windows overlap, the CPU rounds
# each partial sum of gradients to the dtype; the decomposition's result is one
# step off in a few elements per thousand (tests/test_pool.py on pjrt). The C
# kernel (staged through the host on a driver without host kernels) is the CPU's.
_DECLINE["aten::max_pool2d_with_indices_backward"] = lambda args: args[0].dtype in (torch.bfloat16, torch.float16)
# bucketize (kernels/index.c): the reference does not compare a Scalar in the
# boundaries' dtype as the CPU does (0.1 against float16 boundaries holding 0.1:
# 1 instead of the CPU's 0); declined, so a driver without a lowering stages it
# through the host kernel.
_DECLINE["aten::bucketize"] = lambda args: True


def run(name: str, overload: str, args: tuple, kwargs: dict):
    """Runs `name.overload` by its decomposition, or returns NotImplemented.
    Calls with complex data take the rules of torch_tpu/_complex.py first."""
    op, fn = _lookup(name, overload)
    if op is None:
        return NotImplemented
    if name.partition("::")[2] in _complex.PRODUCERS or _complex.involved(args, kwargs):
        rule = _complex.rule(op)
        if rule is not None:
            res = _apply(op, rule, args, kwargs)
            if res is not NotImplemented:
                return res
    decline = _DECLINE.get(f"{name}.{overload}") or _DECLINE.get(name)
    if decline is not None and decline(args):
        return NotImplemented
    if fn is None:
        return NotImplemented
    return _apply(op, fn, args, kwargs)


def _apply(op, fn, args: tuple, kwargs: dict):
    """fn(*args, **kwargs) for `op`; for an out= overload whose entry computes
    the functional result, that result is written into the out= tensors."""
    outs = _out_names(op)
    if not outs or op in _OWN_OUT or not all(k in kwargs for k in outs):
        res = fn(*args, **kwargs)
        if res is not NotImplemented:
            _counts[str(op)] += 1
        return res
    # An out= overload: the table's entry is often the functional op's,
    # registered for every overload (it takes no `grad_input=`, `values=`,
    # ...). The result is computed without them and written into them, as
    # PyTorch's out= rule says (resized when the sizes differ).
    kwargs = dict(kwargs)
    dst = [kwargs.pop(k) for k in outs]
    res = fn(*args, **kwargs)
    if res is NotImplemented:  # the decomposition declines these inputs itself
        return NotImplemented
    _counts[str(op)] += 1
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(res) != len(dst):
        raise RuntimeError(f"{op}: its decomposition returned {len(res)} tensors for {len(dst)} out= arguments")
    for d, r in zip(dst, res):
        # PyTorch's out= rule (TensorIterator's, and torch._prims_common.can_safe_cast_to
        # in its refs' out wrapper): no float result into an integer out=, no complex into
        # a real one, nothing but bool into a bool one. Not for ops that take a dtype
        # (logspace, sum, ...): there the out= tensor's dtype is the one asked for.
        if not _takes_dtype(op) and not torch.can_cast(r.dtype, d.dtype):
            raise RuntimeError(f"{op}: result type {_type_name(r.dtype)} can't be cast to the desired output "
                               f"type {_type_name(d.dtype)}")
    for d, r in zip(dst, res):
        if d.shape != r.shape:
            d.resize_(r.shape)
        d.copy_(r)
    return dst[0] if len(dst) == 1 else tuple(dst)


def _type_name(dtype) -> str:
    """ATen's name of a dtype, as its errors print it (Float, Long, BFloat16, ...)."""
    return torch.empty((), dtype=dtype, device="meta").type().rsplit(".", 1)[-1].replace("Tensor", "")


_TAKES_DTYPE: dict = {}


def _takes_dtype(op) -> bool:
    """Whether some overload of `op` has a `dtype` argument."""
    packet = op.overloadpacket
    got = _TAKES_DTYPE.get(packet)
    if got is None:
        got = _TAKES_DTYPE[packet] = any(
            a.name == "dtype" for o in packet.overloads() for a in getattr(packet, o)._schema.arguments)
    return got


_OUT_NAMES: dict = {}


def _out_names(op) -> tuple:
    """Names of the keyword-only arguments `op` writes (its out= tensors)."""
    names = _OUT_NAMES.get(op)
    if names is None:
        names = _OUT_NAMES[op] = tuple(
            a.name for a in op._schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
    return names


def decomposition_report() -> dict:
    """{ATen op: number of eager calls run by their decomposition}."""
    return dict(_counts)


def reset_decomposition_report() -> None:
    _counts.clear()

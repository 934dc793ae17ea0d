"""Eager decompositions for drivers without host kernels (pjrt).

When the driver has no lowering of an ATen call (its op, dtypes or
arguments), the bridge (csrc/aten/decompose.cpp) calls `run` before taking
PyTorch's CPU fallback: if PyTorch's decomposition table (torch._decomp, the
table torch.compile's graphs are decomposed with) has an entry for the op, it
runs on the tpu tensors, so each op it is made of reaches the driver: its
lowering, a further decomposition, or the CPU fallback for that smaller op.
The host driver never comes here (every op of its kernel table runs natively).

`decomposition_report()` counts the decomposed calls per op.
"""
from __future__ import annotations

import collections

import torch

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


_LOCAL = {
    torch.ops.aten.var.correction: _var,
    torch.ops.aten.std.correction: _std,
    torch.ops.aten.var_mean.correction: _var_mean,
    torch.ops.aten.signbit.default: _signbit,
}


def _lookup(name: str, overload: str):
    global _table
    if _table is None:
        from torch._decomp import decomposition_table
        _table = {**decomposition_table, **_LOCAL}
    ns, _, base = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), base)
        op = getattr(packet, overload or "default")
    except AttributeError:
        return None, None
    return op, _table.get(op)


def run(name: str, overload: str, args: tuple, kwargs: dict):
    """Runs `name.overload` by its decomposition, or returns NotImplemented."""
    op, fn = _lookup(name, overload)
    if fn is None:
        return NotImplemented
    _counts[str(op)] += 1
    return fn(*args, **kwargs)


def decomposition_report() -> dict:
    """{ATen op: number of eager calls run by their decomposition}."""
    return dict(_counts)


def reset_decomposition_report() -> None:
    _counts.clear()

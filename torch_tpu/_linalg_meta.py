"""Meta functions PyTorch lacks for linear-algebra ops the tpu kernels run.

The bridge takes every native op's output sizes and strides from PyTorch's
meta function (csrc/aten/ops.cpp); aten::geqrf has none, so it is registered
here with the CPU's layout: `a` column-major per matrix (LAPACK's), `tau`
contiguous with min(m, n) elements per matrix.
"""
from __future__ import annotations

import torch

_lib = torch.library.Library("aten", "IMPL")


def _geqrf_layout(A):
    torch._check(A.dim() >= 2, lambda: f"torch.geqrf: input must have at least 2 dimensions, got {A.dim()}")
    torch._check(A.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128),
                 lambda: f"torch.geqrf: Expected a floating point or complex tensor as input. Got {A.dtype}")
    *batch, m, n = A.shape
    strides = [1, max(m, 1)]
    step = m * n
    for b in reversed(batch):
        strides.insert(0, step)
        step *= b
    k = min(m, n)
    return tuple(A.shape), tuple(strides), tuple(batch) + (k,)


def _geqrf_meta(A):
    shape, strides, tau_shape = _geqrf_layout(A)
    return A.new_empty_strided(shape, strides), A.new_empty(tau_shape)


def _geqrf_out_meta(A, *, a, tau):
    shape, strides, tau_shape = _geqrf_layout(A)
    a.resize_(shape)
    tau.resize_(tau_shape)
    return a, tau


_lib.impl("geqrf", _geqrf_meta, "Meta")
_lib.impl("geqrf.a", _geqrf_out_meta, "Meta")

"""Meta kernels for ATen ops that PyTorch ships without one.

The bridge sizes every native kernel's outputs by running the op on meta
tensors (csrc/aten/ops.cpp, output_meta); an op with no Meta kernel and no
fake implementation cannot be sized that way. These follow the CPU kernels'
outputs: for _logcumsumexp(self, dim), a contiguous tensor of self's sizes
and dtype (the .out overload resizes `out` to them). The dim is checked as
the CPU checks it."""
from __future__ import annotations

import torch

_lib = None


def _logcumsumexp(self, dim):
    torch._prims_common.canonicalize_dim(self.dim(), dim)
    return torch.empty(self.shape, dtype=self.dtype, device=self.device)


def _logcumsumexp_out(self, dim, *, out):
    torch._prims_common.canonicalize_dim(self.dim(), dim)
    if out.shape != self.shape:
        out.resize_(self.shape)
    return out


def install():
    """Registers the Meta kernels (once per process)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_logcumsumexp", _logcumsumexp, "Meta")
    lib.impl("_logcumsumexp.out", _logcumsumexp_out, "Meta")
    _lib = lib

"""Gradients of upsampling (F.interpolate's nearest, nearest-exact, linear,
bilinear, bicubic, trilinear; the antialiased 2-D modes) on device ops: each
backward op is the vector-Jacobian product of its forward decomposition
(torch_tpu/_decomp.py _LINEAR_BACKWARDS), against the CPU's backward kernels,
with the CPU fallback forbidden."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

CASES = [  # mode, input shape, interpolate kwargs
    ("nearest", (2, 3, 5), dict(size=8)),
    ("nearest", (2, 3, 5, 4), dict(scale_factor=(1.7, 2.0))),
    ("nearest", (1, 2, 3, 4, 5), dict(size=(5, 3, 7))),
    ("nearest-exact", (2, 3, 5), dict(size=3)),
    ("nearest-exact", (2, 3, 5, 4), dict(size=(7, 9))),
    ("linear", (2, 3, 6), dict(size=11, align_corners=True)),
    ("linear", (2, 3, 6), dict(scale_factor=0.6)),
    ("bilinear", (2, 3, 5, 7), dict(size=(9, 4))),
    ("bilinear", (2, 3, 5, 7), dict(size=(9, 4), align_corners=True)),
    ("bicubic", (2, 2, 6, 5), dict(size=(8, 11))),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=1.5)),
]


pytestmark = pytest.mark.usefixtures("no_fallback")  # conftest.py: the CPU fallback raises


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode,shape,kw", CASES)
def test_upsample_backward_equals_cpu(mode, shape, kw, dtype):
    g = torch.Generator().manual_seed(len(shape) + len(mode))
    x = torch.randn(shape, generator=g, dtype=dtype)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want = F.interpolate(xc, mode=mode, **kw)
    got = F.interpolate(xt, mode=mode, **kw)
    w = torch.randn(want.shape, generator=g, dtype=dtype)
    (want * w).sum().backward()
    (got * w.to("tpu")).sum().backward()
    assert xt.grad.device.type == "tpu" and xt.grad.dtype == dtype
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_upsample_backward_equals_cpu(mode):
    # the backward op directly (its forward runs by the .vec decomposition)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 12, 10, generator=g)
    grad = torch.randn(2, 3, 5, 4, generator=g)
    op = getattr(torch.ops.aten, f"_upsample_{mode}2d_aa_backward")
    want = op(grad, [5, 4], list(x.shape), False)
    got = op(grad.to("tpu"), [5, 4], list(x.shape), False)
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size,align", [((5, 4), False), ((5, 4), True), ((25, 13), False), ((1, 1), True), ((12, 3), False)])
def test_antialiased_upsample_equals_cpu(mode, size, align):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 12, 10, generator=g, dtype=torch.float64)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want = F.interpolate(xc, size=size, mode=mode, antialias=True, align_corners=align)
    got = F.interpolate(xt, size=size, mode=mode, antialias=True, align_corners=align)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    w = torch.randn(want.shape, generator=g, dtype=torch.float64)
    (want * w).sum().backward()
    (got * w.to("tpu")).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    f32 = F.interpolate(x.float().to("tpu"), scale_factor=0.37, mode=mode, antialias=True)
    torch.testing.assert_close(f32.cpu(), F.interpolate(x.float(), scale_factor=0.37, mode=mode, antialias=True))

"""Half-precision and integer cases where the tpu must compute as the CPU's
kernel does (issue #15): linalg.cross rounds each product to the dtype,
group_norm computes in float32 with the CPU's x * scale + shift,
native_dropout_backward takes integer and bool gradients (a float32 result)
and multiplies in float opmath, geometric_ fills integer tensors."""
import pytest
import torch

import torch_tpu  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_fallback")  # conftest.py: the CPU fallback raises

LOW = [torch.bfloat16, torch.float16]


def _tpu(t):
    return None if t is None else t.to("tpu")


@pytest.mark.parametrize("dtype", LOW)
def test_cross_matches_cpu_bits(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(50, 3, 50, generator=g).to(dtype)
    b = torch.randn(50, 3, 50, generator=g).to(dtype)
    for fn in (lambda a, b: torch.linalg.cross(a, b, dim=1), lambda a, b: torch.cross(a, b, dim=1)):
        want = fn(a, b)
        got = fn(_tpu(a), _tpu(b)).cpu()
        assert got.dtype == want.dtype
        assert torch.equal(got, want)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.linalg.cross(_tpu(a), _tpu(b), dim=1, out=out)
    assert torch.equal(out.cpu(), torch.linalg.cross(a, b, dim=1))


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("shape,groups", [((4, 6, 7), 2), ((2, 6, 5, 5), 3), ((1, 6, 3), 6)])
def test_group_norm_matches_cpu(dtype, affine, shape, groups):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(*shape, generator=g) * 3 + 1).to(dtype)
    w = torch.randn(shape[1], generator=g).to(dtype) if affine[0] else None
    b = torch.randn(shape[1], generator=g).to(dtype) if affine[1] else None
    want = torch.nn.functional.group_norm(x, groups, w, b, eps=0.5)
    got = torch.nn.functional.group_norm(_tpu(x), groups, _tpu(w), _tpu(b), eps=0.5).cpu()
    torch.testing.assert_close(got, want)
    ref = torch.nn.functional.group_norm(x.double(), groups, None if w is None else w.double(),
                                         None if b is None else b.double(), eps=0.5)
    assert (got.double() - ref).abs().max() <= (want.double() - ref).abs().max()
    N, C = shape[0], shape[1]
    hw = x[0, 0].numel()
    want3 = torch.ops.aten.native_group_norm(x, w, b, N, C, hw, groups, 0.5)
    got3 = torch.ops.aten.native_group_norm(_tpu(x), _tpu(w), _tpu(b), N, C, hw, groups, 0.5)
    for gt, wt in zip(got3, want3):
        assert gt.dtype == wt.dtype and gt.shape == wt.shape
        torch.testing.assert_close(gt.cpu(), wt)


def test_group_norm_grad_and_float32_unchanged():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 5, generator=g, dtype=torch.bfloat16)
    w = torch.randn(6, generator=g, dtype=torch.bfloat16)
    xt = _tpu(x).requires_grad_()
    torch.nn.functional.group_norm(xt, 2, _tpu(w)).sum().backward()
    xc = x.clone().requires_grad_()
    torch.nn.functional.group_norm(xc, 2, w).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=2e-2, rtol=2e-2)
    xf = x.float()
    torch.testing.assert_close(torch.nn.functional.group_norm(_tpu(xf), 2, _tpu(w.float())).cpu(),
                               torch.nn.functional.group_norm(xf, 2, w.float()))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
                                   torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("scale", [0.0, 2.0, 1 / 0.7, 1 / 0.9])
def test_native_dropout_backward_matches_cpu_bits(dtype, scale):
    g = torch.Generator().manual_seed(3)
    if dtype.is_floating_point:
        grad = torch.randn(5, 5, 5, 5, generator=g).to(dtype)
    else:
        grad = torch.randint(0, 100, (5, 5, 5, 5), generator=g).to(dtype)
    mask = torch.rand(5, 5, 5, 5, generator=g) > 0.3
    want = torch.ops.aten.native_dropout_backward(grad, mask, scale)
    got = torch.ops.aten.native_dropout_backward(_tpu(grad), _tpu(mask), scale).cpu()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_geometric_integer(dtype):
    t = torch.zeros(4000, dtype=dtype, device="tpu")
    r = t.geometric_(0.2)
    assert r is t
    v = t.cpu()
    assert v.dtype == dtype and v.shape == (4000,)
    assert (v >= 1).all()
    assert abs(v.double().mean().item() - 5.0) < 0.5  # mean 1/p
    with pytest.raises(RuntimeError):
        torch.zeros(3, dtype=dtype, device="tpu").geometric_(1.5)

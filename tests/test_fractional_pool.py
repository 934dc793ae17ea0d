"""fractional_max_pool2d/3d and their backwards on device ops (torch_tpu/_decomp.py):
with the same random samples, the CPU's windows, values and indices exactly (NaN
included), gradients, unbatched inputs, the CPU's bounds errors. The CPU
fallback is forbidden."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

CASES = [  # input shape, kernel, output size
    ((2, 3, 9, 9), 3, (2, 3)),
    ((3, 10, 7), (2, 3), (4, 3)),      # unbatched
    ((2, 4, 11, 6), (3, 2), (5, 4)),   # height and width differ: samples are (width, height)
    ((2, 3, 5, 5, 5), (2, 2, 2), (2, 3, 2)),
    ((3, 6, 9, 5), (2, 3, 1), (3, 4, 4)),  # unbatched 3-D
    ((0, 2, 6, 6), 2, (3, 3)),         # empty batch
]


pytestmark = pytest.mark.usefixtures("no_fallback")  # conftest.py: the CPU fallback raises


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,kernel,out", CASES)
def test_fractional_max_pool_equals_cpu(shape, kernel, out, dtype):
    g = torch.Generator().manual_seed(len(shape) * 7 + out[0])
    x = torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.float32 and x.numel():
        x.view(-1)[::13] = float("nan")  # a NaN wins its window (the last one, as the CPU's loop)
    nd = len(out)
    batch = shape[0] if len(shape) == nd + 2 else 1
    samples = torch.rand(batch, shape[-nd - 1], nd, generator=g).to(dtype)
    pool = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want = pool(xc, kernel, output_size=out, return_indices=True, _random_samples=samples)
    got = pool(xt, kernel, output_size=out, return_indices=True, _random_samples=samples.to("tpu"))
    assert got[0].device.type == "tpu" and got[0].dtype == dtype and got[1].dtype == torch.int64
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1].cpu(), want[1])
    grad = torch.randn(want[0].shape, generator=g).to(dtype)
    want[0].backward(grad)
    got[0].backward(grad.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=0, atol=0)


def test_fractional_max_pool_random_samples_on_device():
    # without _random_samples the samples come from the device's generator: valid windows
    x = torch.randn(2, 3, 12, 12)
    out, idx = F.fractional_max_pool2d(x.to("tpu"), 3, output_ratio=(0.5, 0.5), return_indices=True)
    assert out.shape == (2, 3, 6, 6) and out.device.type == "tpu"
    assert torch.equal(out.cpu(), x.flatten(2).gather(2, idx.cpu().flatten(2)).view_as(out.cpu()))


@pytest.mark.parametrize("fn,x,kernel,out", [
    (torch.ops.aten.fractional_max_pool2d, (1, 1, 5, 5), [1, 1], [6, 5]),
    (torch.ops.aten.fractional_max_pool3d, (1, 1, 5, 5, 5), [1, 1, 1], [5, 5, 5]),  # 3-D: strictly less
    (torch.ops.aten.fractional_max_pool2d, (5, 5), [1, 1], [2, 2]),
])
def test_fractional_max_pool_errors_as_cpu(fn, x, kernel, out):
    x = torch.randn(x)
    samples = torch.rand(1, 1 if x.dim() > 2 else 5, len(kernel))
    with pytest.raises(RuntimeError) as cpu:
        fn(x, kernel, out, samples)
    with pytest.raises(RuntimeError) as dev:
        fn(x.to("tpu"), kernel, out, samples.to("tpu"))
    assert str(dev.value).split(":")[0].split()[0].rstrip("()") in str(cpu.value) or "too large" in str(cpu.value)
